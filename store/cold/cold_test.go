package cold_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/stagelog"
)

// TestOpenAfterKillInOpen: a process killed while Badger opened leaves the value log and
// memtable files it creates at every open empty; the next open removes them and opens.
func TestOpenAfterKillInOpen(t *testing.T) {
	dir := t.TempDir()
	db, err := cold.Open(cold.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(txn *cold.Txn) error { return stagelog.Put(txn, 1, &stagelog.State{Pos: 7}) }); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	vlogs, _ := filepath.Glob(filepath.Join(dir, "*.vlog"))
	mems, _ := filepath.Glob(filepath.Join(dir, "*.mem"))
	for _, f := range []string{fmt.Sprintf("%06d.vlog", len(vlogs)+1), fmt.Sprintf("%05d.mem", len(mems)+1)} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	db, err = cold.Open(cold.Options{Dir: dir})
	if err != nil {
		t.Fatalf("open after a kill in open: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	if st, _, err := stagelog.Load(db, 1); err != nil || st.Pos != 7 {
		t.Fatalf("stage state %+v, %v", st, err)
	}
}
