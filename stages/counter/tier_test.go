package counter

import (
	"runtime"
	"testing"
	"time"
)

// The cold cache holds at most size ids, keeps what is read again, and copies values in
// and out (a caller's buffer is never aliased).
func TestColdCache(t *testing.T) {
	c := coldCache{size: 8}
	v := []uint64{1, 2}
	for id := range uint64(4) {
		v[0] = id
		c.put(id, v)
	}
	v[0] = 99
	got := make([]uint64, 2)
	if !c.get(0, got) || got[0] != 0 {
		t.Fatalf("id 0: %v", got)
	}
	for id := uint64(10); id < 100; id++ {
		c.put(id, v)
		c.get(0, got) // read again and again: stays
		if n := c.len(); n > c.size || len(c.young.vals)+len(c.old.vals) > c.size*len(v) {
			t.Fatalf("%d ids cached, size %d", n, c.size)
		}
	}
	if !c.get(0, got) || got[0] != 0 {
		t.Fatal("an id read at every step was dropped")
	}
	if c.get(1, got) || c.get(10, got) {
		t.Fatal("old ids still cached")
	}
	c.drop(0)
	if c.get(0, got) {
		t.Fatal("dropped id still cached")
	}
	// Ids dropped and cached again, again and again (a cold id changed, moved into the
	// table and evicted): their slots are reused, the values always the last put.
	for i := range uint64(1000) {
		v[0], v[1] = i, i+1
		c.put(i%3, v)
		c.drop(i % 3)
		c.put(i%3, v)
		if !c.get(i%3, got) || got[0] != i || got[1] != i+1 {
			t.Fatalf("step %d: id %d reads %v", i, i%3, got)
		}
		if len(c.young.vals)+len(c.old.vals) > c.size*len(v) {
			t.Fatalf("step %d: %d values kept for a cache of %d ids", i, len(c.young.vals)+len(c.old.vals), c.size)
		}
	}
}

func TestColdSet(t *testing.T) {
	var c coldSet
	if !c.empty() || c.has(0) || c.has(5) {
		t.Fatal("empty set")
	}
	c.add(9)
	c.add(3)
	c.add(0)
	c.raise(5)
	for gk, want := range map[uint32]bool{0: true, 1: true, 3: true, 4: true, 5: false, 8: false, 9: true, 10: false} {
		if c.has(gk) != want {
			t.Errorf("has(%d) = %v", gk, !want)
		}
	}
	if len(c.groups) != 2 { // 3 is covered by below now; 0 and 9 stay listed
		t.Fatalf("listed %v", c.groups)
	}
}

// BenchmarkColdCache is the cold cache of a worker at tallyd's default size (25 MiB at
// ~100 B an id) taking the counters of cold ids read from Badger and answering them
// again: a put and a get an op, over twice the ids it holds, and a collection at the
// end (what the cache costs the collector to mark).
// Run: go test ./stages/counter -run XXX -bench ColdCache -benchmem
func BenchmarkColdCache(b *testing.B) {
	const size = 262_144
	heap := func() uint64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before := heap()
	c := coldCache{size: size}
	v, got := make([]uint64, 4), make([]uint64, 4)
	b.ReportAllocs()
	for i := range b.N {
		id := uint64(i % (2 * size))
		v[0] = id
		c.put(id*7919, v)
		if !c.get(id*7919, got) || got[0] != id {
			b.Fatalf("id %d: %v", id, got)
		}
	}
	b.StopTimer()
	start := time.Now()
	runtime.GC()
	b.ReportMetric(float64(time.Since(start).Microseconds()), "gc-µs")
	b.ReportMetric(float64(heap()-before)/float64(size), "heap-B/id")
	runtime.KeepAlive(&c)
}
