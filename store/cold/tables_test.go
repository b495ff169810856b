package cold_test

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tally-dev/tally/store/cold"
)

// The tables flushes and compactions write (Badger patched: through the file, not a
// mapping of it) hold every key with its last value, block for block as Badger's
// checksums say, read at once and after the database is opened again.
func TestTablesWrittenWhole(t *testing.T) {
	dir := t.TempDir()
	opts := cold.WithLevelZero(cold.Options{Dir: dir, MemTableSize: 1 << 20, NumMemtables: 2}, 2)
	db, err := cold.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	const keys, perTxn, rounds = 3000, 500, 12
	value := func(k, r int) []byte {
		v := bytes.Repeat([]byte{byte(k)}, 40+k%300) // values of many lengths: blocks end anywhere
		return binary.BigEndian.AppendUint64(v, uint64(r))
	}
	for r := 1; r <= rounds; r++ {
		for from := 0; from < keys; from += perTxn {
			err := db.Update(func(txn *cold.Txn) error {
				for k := from; k < from+perTxn; k++ {
					if r == rounds && k%7 == 0 {
						continue // some keys keep an older round's value
					}
					if err := txn.Set(tableKey(uint64(k)), value(k, r)); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	check := func(db *cold.DB, when string, compacted bool) {
		t.Helper()
		deeper, tables := 0, cold.Tables(db)
		for _, ti := range tables {
			if ti.Level > 0 {
				deeper++
			}
		}
		if len(tables) == 0 || compacted && deeper == 0 {
			t.Fatalf("%s: %d tables, %d below level 0", when, len(tables), deeper)
		}
		if err := cold.VerifyChecksum(db); err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		err := db.View(func(txn *cold.Txn) error {
			for k := range keys {
				r := rounds
				if k%7 == 0 {
					r = rounds - 1
				}
				var got []byte
				found, err := txn.Get(tableKey(uint64(k)), func(v []byte) error {
					got = append(got[:0], v...)
					return nil
				})
				if err != nil || !found {
					t.Fatalf("%s: key %d: found %v, %v", when, k, found, err)
				}
				if !bytes.Equal(got, value(k, r)) {
					t.Fatalf("%s: key %d: %d bytes, not round %d's %d", when, k, len(got), r, len(value(k, r)))
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	check(db, "flushed", false)
	if err := cold.Flatten(db); err != nil {
		t.Fatal(err)
	}
	check(db, "compacted", true)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	tables, _ := filepath.Glob(filepath.Join(dir, "*.sst"))
	if len(tables) == 0 {
		t.Fatal("no table files")
	}
	for _, f := range tables {
		if fi, err := os.Stat(f); err != nil || fi.Size() == 0 {
			t.Fatalf("table %s: %v, %v", strings.TrimPrefix(f, dir), fi, err)
		}
	}
	if db, err = cold.Open(opts); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	check(db, "opened again", true)
}
