package coldcache

import (
	"runtime"
	"testing"
	"time"
)

// TestCache: a cache holds at most Size ids, keeps what is read again, and copies values in
// and out (a caller's buffer is never aliased).
func TestCache(t *testing.T) {
	c := New(8)
	v := []uint64{1, 2}
	for id := range uint64(4) {
		v[0] = id
		c.Put(id, v)
	}
	v[0] = 99
	got := make([]uint64, 2)
	if !c.Get(0, got) || got[0] != 0 {
		t.Fatalf("id 0: %v", got)
	}
	for id := uint64(10); id < 100; id++ {
		c.Put(id, v)
		c.Get(0, got) // read again and again: stays
		if n := c.Len(); n > c.size || len(c.young.vals)+len(c.old.vals) > c.size*len(v) {
			t.Fatalf("%d ids cached, size %d", n, c.size)
		}
	}
	if !c.Get(0, got) || got[0] != 0 {
		t.Fatal("an id read at every step was dropped")
	}
	if c.Get(1, got) || c.Get(10, got) {
		t.Fatal("old ids still cached")
	}
	c.Drop(0)
	if c.Get(0, got) {
		t.Fatal("dropped id still cached")
	}
	// Ids dropped and cached again, again and again (a cold id changed, moved into the
	// table and evicted): their slots are reused, the values always the last put.
	for i := range uint64(1000) {
		v[0], v[1] = i, i+1
		c.Put(i%3, v)
		c.Drop(i % 3)
		c.Put(i%3, v)
		if !c.Get(i%3, got) || got[0] != i || got[1] != i+1 {
			t.Fatalf("step %d: id %d reads %v", i, i%3, got)
		}
		if len(c.young.vals)+len(c.old.vals) > c.size*len(v) {
			t.Fatalf("step %d: %d values kept for a cache of %d ids", i, len(c.young.vals)+len(c.old.vals), c.size)
		}
	}
}

// BenchmarkCache is the cold cache of a counter worker at tallyd's default size (25 MiB at
// ~100 B an id) taking the counters of cold ids read from Badger and answering them
// again: a put and a get an op, over twice the ids it holds, and a collection at the
// end (what the cache costs the collector to mark).
// Run: go test ./store/coldcache -run XXX -bench Cache -benchmem
func BenchmarkCache(b *testing.B) {
	const size = 262_144
	heap := func() uint64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before := heap()
	c := New(size)
	v, got := make([]uint64, 4), make([]uint64, 4)
	b.ReportAllocs()
	for i := range b.N {
		id := uint64(i % (2 * size))
		v[0] = id
		c.Put(id*7919, v)
		if !c.Get(id*7919, got) || got[0] != id {
			b.Fatalf("id %d: %v", id, got)
		}
	}
	b.StopTimer()
	start := time.Now()
	runtime.GC()
	b.ReportMetric(float64(time.Since(start).Microseconds()), "gc-µs")
	b.ReportMetric(float64(heap()-before)/float64(size), "heap-B/id")
	runtime.KeepAlive(c)
}
