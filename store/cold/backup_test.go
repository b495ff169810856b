package cold_test

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/tally-dev/tally/store/cold"
)

// A backup restored into another directory holds the same counters and checkpoint.
func TestBackupRestore(t *testing.T) {
	db := open(t)
	cp := &cold.Checkpoint{Pos: 9, Marks: map[uint32]*cold.Mark{}}
	if err := cold.SaveCounters(db, "post", 3, []cold.Entry{{ID: 5, Counts: []uint64{1, 2, 3, 4}}}, cp, cold.Journal{}); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := db.Backup(&buf); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "state")
	if err := cold.Restore(dir, &buf, nil); err != nil {
		t.Fatal(err)
	}
	back, err := cold.Open(cold.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	got := [][]uint64{make([]uint64, 4)}
	c, err := cold.LoadCheckpoint(back, "post", 3)
	if err != nil || c.Pos != 9 || cold.Counts(back, "post", 3, []uint64{5}, got) != nil || got[0][3] != 4 {
		t.Fatalf("restored: checkpoint %+v %v, counts %v", c, err, got)
	}
	if err := cold.Restore(dir, bytes.NewReader([]byte("not a backup")), nil); err == nil {
		t.Fatal("a bad backup restored")
	}
}
