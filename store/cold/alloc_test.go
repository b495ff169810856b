package cold_test

import (
	"encoding/binary"
	"testing"

	"github.com/tally-dev/tally/store/cold"
)

// A key written costs Badger a bounded number of allocations, its memtable insert and
// log entry included: 3 with store/cold/badger's patches, 9 with Badger v4.9.6, which
// allocated the log entry's checksum writers and boxed the arguments of its skiplist
// arena's assertions for every key (store/cold/badger/PATCHES.md).
func TestWriteAllocations(t *testing.T) {
	db, err := cold.Open(cold.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const keys = 1000
	key, val := make([]byte, 12), make([]byte, 40)
	round := 0
	allocs := testing.AllocsPerRun(20, func() {
		round++
		txn := db.NewTxn(true)
		for i := range keys {
			binary.BigEndian.PutUint64(key[4:], uint64(round*keys+i)*0x9E3779B97F4A7C15)
			if err := txn.Set(key, val); err != nil {
				t.Fatal(err)
			}
		}
		if err := txn.Commit(); err != nil {
			t.Fatal(err)
		}
	}) / keys
	t.Logf("%.2f allocations a key written", allocs)
	if allocs > 4 {
		t.Errorf("%.2f allocations a key written, want at most 4", allocs)
	}
}
