package cold_test

import (
	"encoding/binary"
	"runtime"
	"testing"
	"time"

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
	if allocs > 4 {
		t.Errorf("%.2f allocations a key written, want at most 4", allocs)
	}
}

// Nothing of a table's build stays in RAM once the table is written: Badger v4.9.6
// pooled up to eight table builders with the buffers they had grown to, and freed one
// only after 2 s without a build, so the builders of small tables held on to the
// buffers of the largest: 552–564 MB of heap draining a backlog of 2 M events
// (docs/performance.md, the row "table builds unpooled"). store/cold/badger builds
// each table in buffers of its own.
func TestTableBuildsNotHeld(t *testing.T) {
	const memtable = 8 << 20
	db, err := cold.Open(cold.Options{Dir: t.TempDir(), MemTableSize: memtable, NumMemtables: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
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
		txn := db.NewTxn(true)
		for range 1000 {
			key := binary.BigEndian.AppendUint64(make([]byte, 8, 16), i*0x9E3779B97F4A7C15)
			if err := txn.Set(key, val); err != nil {
				t.Fatal(err)
			}
			i++
		}
		if err := txn.Commit(); err != nil {
			t.Fatal(err)
		}
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
