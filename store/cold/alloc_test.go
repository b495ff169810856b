package cold_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/tally-dev/tally/store/cold"
)

// A key written costs Badger a bounded number of allocations, its memtable insert and
// log entry included: 0.05 with store/cold/badger's patches, where a transaction takes
// its entries and the copies of its keys from blocks; 9 with Badger v4.9.6, which
// allocated for every key its entry, a string of it, a copy with its version, the log
// entry's checksum writers and the boxed arguments of its skiplist arena's assertions
// (store/cold/badger/PATCHES.md).
func TestWriteAllocations(t *testing.T) {
	db, err := cold.Open(cold.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const keys = 1000
	// Badger holds a key until its transaction commits: each key its own bytes.
	buf, val := make([]byte, keys*12), make([]byte, 40)
	round := 0
	allocs := testing.AllocsPerRun(20, func() {
		round++
		txn := db.NewTxn(true)
		for i := range keys {
			key := buf[i*12 : i*12+12]
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
	if allocs > 0.5 {
		t.Errorf("%.2f allocations a key written, want at most 0.5", allocs)
	}
}

// smallMemtable is the memtable of the tests that need tables written: 8 MiB, flushed
// every ~35 000 keys of writeKeys.
const smallMemtable = 8 << 20

// openSmall opens a DB with smallMemtable, closed when the test ends.
func openSmall(t *testing.T) *cold.DB {
	t.Helper()
	db, err := cold.Open(cold.Options{Dir: t.TempDir(), MemTableSize: smallMemtable, NumMemtables: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// tableKey is the i-th key writeKeys writes: spread over the key space.
func tableKey(i uint64) []byte {
	return binary.BigEndian.AppendUint64(make([]byte, 8, 16), 2*i*0x9E3779B97F4A7C15)
}

// writeKeys writes keys from to from+999 with val, in one transaction, and returns the
// next.
func writeKeys(t *testing.T, db *cold.DB, from uint64, val []byte) uint64 {
	t.Helper()
	txn := db.NewTxn(true)
	for i := from; i < from+1000; i++ {
		if err := txn.Set(tableKey(i), val); err != nil {
			t.Fatal(err)
		}
	}
	if err := txn.Commit(); err != nil {
		t.Fatal(err)
	}
	return from + 1000
}

// Nothing of a table's build stays in RAM once the table is written: Badger v4.9.6
// pooled up to eight table builders with the buffers they had grown to, and freed one
// only after 2 s without a build, so the builders of small tables held on to the
// buffers of the largest: 552–564 MB of heap draining a backlog of 2 M events
// (docs/performance.md, the row "table builds unpooled"). store/cold/badger builds
// each table in buffers of its own.
func TestTableBuildsNotHeld(t *testing.T) {
	const memtable = smallMemtable
	db := openSmall(t)
	heap := func() int64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	before := heap()
	// Keys until three memtables are flushed, each to a table of its own: fewer than
	// Badger compacts (five), so that no build is under way after the third.
	val := make([]byte, 200)
	for i := uint64(0); len(cold.Tables(db)) < 3; {
		i = writeKeys(t, db, i, val)
	}
	// A memtable flushed is let go just after its table is listed: a second, well
	// within the 2 s a pooled builder was kept.
	held := heap() - before
	for start := time.Now(); held > memtable/2 && time.Since(start) < time.Second; held = heap() - before {
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("%d tables written, %.1f MiB more heap than before", len(cold.Tables(db)), float64(held)/(1<<20))
	if held > memtable/2 {
		t.Errorf("%.1f MiB of heap held after the tables were built, want at most %d MiB", float64(held)/(1<<20), memtable/2>>20)
	}
}

// A key looked for costs Badger a bounded number of allocations, whether it is there or
// not, with its memtables and tables at level 0 and below to look through: an event
// stage looks for a like record, a reader record or a counter for most events, and
// most of those of a user never seen are not there.
func TestGetAllocations(t *testing.T) {
	db := openSmall(t)
	// Keys until a compaction has moved tables below level 0 and level 0 has tables again.
	val := bytes.Repeat([]byte("tally"), 40)
	n := uint64(0)
	for deep := false; !deep || len(cold.Tables(db)) < 3; {
		n = writeKeys(t, db, n, val)
		for _, ti := range cold.Tables(db) {
			deep = deep || ti.Level > 0
		}
	}
	levels := map[int]int{}
	for _, ti := range cold.Tables(db) {
		levels[ti.Level]++
	}
	txn := db.NewTxn(true)
	defer txn.Discard()
	absent := func(i uint64) []byte { return append(tableKey(i), 0) } // between two keys written
	for _, c := range []struct {
		name    string
		key     func(i uint64) []byte
		present bool
		want    float64
	}{
		{"absent", absent, false, 1},
		{"present", tableKey, true, 5},
	} {
		keys := make([][]byte, 1000)
		for i := range keys {
			keys[i] = c.key(uint64(i) * n / uint64(len(keys)))
		}
		// The least of five measures: Badger's compactions allocate beside them.
		found, allocs := 0, math.Inf(1)
		same := func(v []byte) error {
			if !bytes.Equal(v, val) {
				return fmt.Errorf("value %x, want %x", v, val)
			}
			return nil
		}
		for range 5 {
			allocs = min(allocs, testing.AllocsPerRun(5, func() {
				found = 0
				for _, k := range keys {
					ok, err := txn.Get(k, same)
					if err != nil {
						t.Fatal(err)
					}
					if ok {
						found++
					}
				}
			})/float64(len(keys)))
		}
		t.Logf("%s: %.2f allocations a key looked for, %d of %d found; tables by level %v", c.name, allocs, found, len(keys), levels)
		if c.present && found != len(keys) || !c.present && found != 0 {
			t.Errorf("%s: %d of %d keys found", c.name, found, len(keys))
		}
		if allocs > c.want {
			t.Errorf("%s: %.2f allocations a key looked for, want at most %.0f", c.name, allocs, c.want)
		}
	}
}
