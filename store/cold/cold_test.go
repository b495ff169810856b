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

// TestMemtableLogReplayed: what a process wrote and never flushed to a table is read back
// from the memtables' logs at the next open — a copy of the directory taken while the
// database is open, as a SIGKILL leaves it — every key with its value, among keys of
// many lengths, values of many lengths and deletes.
func TestMemtableLogReplayed(t *testing.T) {
	dir := t.TempDir()
	db, err := cold.Open(cold.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	want := map[string][]byte{}
	for round := range 10 {
		err := db.Update(func(txn *cold.Txn) error {
			for i := range 500 {
				k := fmt.Appendf(nil, "key %d %0*d", (round*500+i)%2000, i%50, 0)
				if i%7 == 3 {
					want[string(k)] = nil
					if err := txn.Delete(k); err != nil {
						return err
					}
					continue
				}
				v := fmt.Appendf(nil, "%d.%d %0*d", round, i, i%300, 0)
				want[string(k)] = v
				if err := txn.Set(k, v); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := len(cold.Tables(db)); n != 0 {
		t.Fatalf("%d tables written: the keys must be in the memtables' logs only", n)
	}
	// The value logs hold no value here (all are below the threshold) and are mapped at
	// 1 GiB each: they are left out of the copy, which opens with new ones.
	crashed := t.TempDir()
	files, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if filepath.Ext(f.Name()) == ".vlog" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, f.Name()))
		if err == nil {
			err = os.WriteFile(filepath.Join(crashed, f.Name()), b, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	re, err := cold.Open(cold.Options{Dir: crashed})
	if err != nil {
		t.Fatal(err)
	}
	defer re.Close()
	err = re.View(func(txn *cold.Txn) error {
		for k, v := range want {
			var got []byte
			found, err := txn.Get([]byte(k), func(b []byte) error { got = append([]byte{}, b...); return nil })
			switch {
			case err != nil:
				return err
			case found != (v != nil) || string(got) != string(v):
				return fmt.Errorf("%q: found %v %q, want found %v %q", k, found, got, v != nil, v)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
