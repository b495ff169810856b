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

// Tables are written uncompressed unless Snappy is asked for, and a database opened
// either way reads the tables written the other way: an upgrade from a tallyd that
// compressed them (every one before --cold-compression) and a move back both read every
// key.
func TestTableCompression(t *testing.T) {
	dir := t.TempDir()
	const n = 20_000
	key := func(i int) []byte { return []byte(fmt.Sprintf("c|post|%08d", i)) }
	val := func(i, round int) []byte { return []byte(fmt.Sprintf("likes=%d views=%d round=%d", i%7, i%13, round)) }
	for round, snappy := range []bool{true, false, true} {
		db, err := cold.Open(cold.Options{Dir: dir, Snappy: snappy})
		if err != nil {
			t.Fatal(err)
		}
		if o := db.Options(); o.Snappy != snappy || (!snappy && o.BlockCacheSize != 0) {
			t.Errorf("round %d: opened with snappy %v, block cache %d", round, o.Snappy, o.BlockCacheSize)
		}
		// What every round before wrote is there, whichever way its tables were written.
		if err := db.View(func(txn *cold.Txn) error {
			for i := range n {
				for r := range round {
					k := key(i + r*n)
					if ok, err := txn.Get(k, func(v []byte) error {
						if string(v) != string(val(i+r*n, r)) {
							return fmt.Errorf("%s = %q, want %q", k, v, val(i+r*n, r))
						}
						return nil
					}); err != nil || !ok {
						return fmt.Errorf("%s: found %v, %v", k, ok, err)
					}
				}
			}
			return nil
		}); err != nil {
			t.Fatalf("round %d (snappy %v): %v", round, snappy, err)
		}
		before := map[uint64]bool{}
		for _, ti := range cold.Tables(db) {
			before[ti.ID] = true
		}
		txn := db.NewTxn(true)
		for i := range n {
			if err := txn.Set(key(i+round*n), val(i+round*n, round)); err != nil {
				t.Fatal(err)
			}
		}
		if err := txn.Commit(); err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil { // flushes the memtable to a table
			t.Fatal(err)
		}
		db, err = cold.Open(cold.Options{Dir: dir, Snappy: snappy})
		if err != nil {
			t.Fatal(err)
		}
		written := 0
		for _, ti := range cold.Tables(db) {
			if before[ti.ID] {
				continue
			}
			written++
			// These values compress several times over: a table that takes less disk
			// than its blocks did is compressed.
			if compressed := ti.OnDiskSize < ti.UncompressedSize; compressed != snappy {
				t.Errorf("round %d: table %d written with snappy %v takes %d B on disk for %d B of blocks", round, ti.ID, snappy, ti.OnDiskSize, ti.UncompressedSize)
			}
		}
		if written == 0 {
			t.Errorf("round %d: no table written", round)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
