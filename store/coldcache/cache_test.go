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
	if !c.Has(0) || c.Has(1) {
		t.Fatal("Has: 0 is held, 1 is not")
	}
	c.Drop(0)
	if c.Has(0) || c.Get(0, got) {
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

// TestBudget: caches drawing on one budget share it evenly among those that hold ids —
// one alone may hold the whole budget, a cache that never held any takes nothing — each
// takes its smaller share up as its young generation turns, and a closed cache gives its
// share back.
func TestBudget(t *testing.T) {
	const ids = 1000
	b := NewBudget(ids)
	fill := func(c *Cache, from, n int) {
		for i := range n {
			c.Put(uint64(from+i), []uint64{uint64(from + i)})
		}
	}
	held := func(cs ...*Cache) (n int) {
		for _, c := range cs {
			n += c.Len()
		}
		return n
	}
	a, idle := b.Cache(), b.Cache()
	fill(a, 0, 5*ids)
	if b.Holders() != 1 || a.Size() != ids || a.Len() <= ids/2 || a.Len() > ids {
		t.Fatalf("alone: %d holders, size %d, %d ids held; want 1, %d, up to %d", b.Holders(), a.Size(), a.Len(), ids, ids)
	}
	if idle.Size() != ids/2 {
		t.Fatalf("a cache holding nothing would get %d, want %d", idle.Size(), ids/2)
	}
	c := b.Cache()
	fill(c, 10*ids, 5*ids)
	fill(a, 20*ids, ids) // a's young generation turns: it takes up its half
	if b.Holders() != 2 || a.Size() != ids/2 || c.Size() != ids/2 {
		t.Fatalf("two holders: %d, sizes %d and %d, want 2, %d, %d", b.Holders(), a.Size(), c.Size(), ids/2, ids/2)
	}
	if n := held(a, c, idle); n > ids {
		t.Fatalf("%d ids held in all, budget %d", n, ids)
	}
	for id := range uint64(20 * ids) { // what each holds is what was put
		got := []uint64{0}
		for _, x := range []*Cache{a, c} {
			if x.Get(id+20*ids, got) && got[0] != id+20*ids {
				t.Fatalf("id %d reads %d", id+20*ids, got[0])
			}
		}
	}
	a.Close()
	if b.Holders() != 1 || a.Len() != 0 || c.Size() != ids {
		t.Fatalf("after a closed: %d holders, a holds %d, c's size %d; want 1, 0, %d", b.Holders(), a.Len(), c.Size(), ids)
	}
	c.Close()
	if b.Holders() != 0 {
		t.Fatalf("%d holders after both closed", b.Holders())
	}
}

// TestIdleCacheGivesBack: a cache on a budget that is neither asked nor given an id for
// IdleTicks ticks in a row gives its share back, and the caches still in use take it up;
// one asked, even for ids it does not hold, keeps its share.
func TestIdleCacheGivesBack(t *testing.T) {
	const ids = 1000
	b := NewBudget(ids)
	a, c, plain := b.Cache(), b.Cache(), New(10)
	v := []uint64{7}
	a.Put(1, v)
	c.Put(2, v)
	plain.Put(3, v)
	for tick := 1; tick < 2*IdleTicks; tick++ {
		a.Get(99, v) // a miss is a use
		a.Tick()
		c.Tick()
		plain.Tick()
		// c's first tick ends the period of its put; IdleTicks more close it.
		if want := 2 - min((tick-1)/IdleTicks, 1); b.Holders() != want {
			t.Fatalf("tick %d: %d holders, want %d", tick, b.Holders(), want)
		}
	}
	if c.Len() != 0 || a.Len() != 1 || a.Size() != ids {
		t.Fatalf("the idle cache holds %d, the other %d of size %d; want 0, 1 of %d", c.Len(), a.Len(), a.Size(), ids)
	}
	if plain.Len() != 1 {
		t.Fatal("a cache without a budget was emptied by its ticks")
	}
	c.Put(2, v) // used again: it takes a share again
	if b.Holders() != 2 || c.Len() != 1 {
		t.Fatalf("%d holders, the cache used again holds %d", b.Holders(), c.Len())
	}
}
