package hot_test

import (
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/tally-dev/tally/pipeline/buildinfo"
	"github.com/tally-dev/tally/store/hot"
)

// snowflakes returns n distinct Twitter-style ids (ms<<22 | worker<<12 | sequence)
// spread evenly over span milliseconds, in time order, as posts are created.
func snowflakes(n int, spanMS uint64) []uint64 {
	const epoch = 1_700_000_000_000
	r := rand.New(rand.NewPCG(5, 6))
	ids := make([]uint64, n)
	for i := range ids {
		ms := epoch + uint64(i)*spanMS/uint64(n)
		ids[i] = ms<<22 | uint64(r.IntN(1024))<<12 | uint64(i%4096)
	}
	return ids
}

// heapDelta returns the bytes fill leaves allocated on the heap.
func heapDelta(fill func() any) (uint64, any) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	keep := fill()
	runtime.GC()
	runtime.ReadMemStats(&after)
	return after.HeapAlloc - before.HeapAlloc, keep
}

// TestMemoryPerID loads 10 M snowflake ids with four counters each, about 1% needing the
// overflow list, and reports bytes per id from the heap for the hot table (as filled, and
// with every group sealed) and for a Go map baseline, at two densities: 30 days of posts
// (about 4 a second: a few ids per time bucket) and one hour (about 2 800 a second). The
// sealed table must hold them in ≤ 13 B/id at both.
func TestMemoryPerID(t *testing.T) {
	n := 10_000_000
	if testing.Short() || buildinfo.Race {
		n = 1_000_000
	}
	for _, c := range []struct {
		name string
		span uint64
	}{{"30days", 30 * 24 * 3_600_000}, {"1hour", 3_600_000}} {
		t.Run(c.name, func(t *testing.T) { testMemory(t, n, c.span) })
	}
}

func testMemory(t *testing.T, n int, span uint64) {
	ids := snowflakes(n, span)
	r := rand.New(rand.NewPCG(1, 2))
	vals := make([][4]uint32, n)
	for i := range vals {
		for f := range vals[i] {
			vals[i][f] = uint32(1 + r.IntN(300))
		}
		if r.IntN(100) == 0 {
			vals[i][3] = 70_000 + uint32(r.IntN(1<<20)) // a viral post's views
		}
	}
	var tb *hot.Table
	hotBytes, _ := heapDelta(func() any {
		tb = hot.New(4)
		for i, id := range ids {
			for f, v := range vals[i] {
				tb.Set(id, f, uint64(v))
			}
		}
		tb.ClearDirty()
		return tb
	})
	compactBytes, _ := heapDelta(func() any { tb.Compact(); return tb })
	sealed := float64(int64(hotBytes)+int64(compactBytes)) / float64(n)
	mapBytes, keep := heapDelta(func() any {
		m := make(map[uint64][4]uint32)
		for i, id := range ids {
			m[id] = vals[i]
		}
		return m
	})
	runtime.KeepAlive(keep)
	if tb.Len() != n {
		t.Fatalf("table holds %d ids, want %d", tb.Len(), n)
	}
	got := make([]uint64, 4)
	for i := 0; i < n; i += 997 {
		tb.Get(ids[i], got)
		for f := range got {
			if got[f] != uint64(vals[i][f]) {
				t.Fatalf("id %d field %d = %d, want %d", ids[i], f, got[f], vals[i][f])
			}
		}
	}
	t.Logf("%d ids: hot %.2f B/id as filled, %.2f B/id sealed (MemBytes %.2f); map[uint64][4]uint32 %.2f B/id (%.1fx)",
		n, float64(hotBytes)/float64(n), sealed, float64(tb.MemBytes())/float64(n),
		float64(mapBytes)/float64(n), float64(mapBytes)/float64(n)/sealed)
	if n == 10_000_000 && sealed > 13 {
		t.Fatalf("sealed hot table takes %.2f B/id, target ≤ 13", sealed)
	}
}
