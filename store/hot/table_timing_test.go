package hot_test

import (
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"github.com/tally-dev/tally/store/hot"
)

// randomSizes are the table sizes of the random-access benchmarks: 1 M ids made over
// 10 minutes (about 1 700 a second) and 10 M over an hour (about 2 800 a second), at
// random times (see arrivals), inserted in time order as posts are created. -short runs
// the first only.
func randomSizes() []struct {
	name   string
	n      int
	spanMS uint64
} {
	sizes := []struct {
		name   string
		n      int
		spanMS uint64
	}{{"1M", 1_000_000, 600_000}, {"10M", 10_000_000, 3_600_000}}
	if testing.Short() {
		sizes = sizes[:1]
	}
	return sizes
}

// arrivals returns n distinct snowflake ids made at random times over spanMS
// milliseconds, in time order: posts arrive independently of each other, so a second
// holds a few more or fewer than the mean, and a key's place in its second deviates from
// an even spread by about the square root of the ids before it — where snowflakes spaces
// them evenly.
func arrivals(n int, spanMS uint64) []uint64 {
	const epoch = 1_700_000_000_000
	r := rand.New(rand.NewPCG(7, 8))
	ids := make([]uint64, 0, n)
	for len(ids) < n {
		for range n - len(ids) {
			ids = append(ids, (epoch+r.Uint64N(spanMS))<<22|r.Uint64N(1<<22))
		}
		slices.Sort(ids)
		ids = slices.Compact(ids)
	}
	return ids
}

// randomIDs returns 1<<20 ids drawn at random from ids, read in order by a benchmark so
// that picking the next id costs no cache miss of its own.
func randomIDs(ids []uint64) []uint64 {
	r := rand.New(rand.NewPCG(3, 4))
	q := make([]uint64, 1<<20)
	for i := range q {
		q[i] = ids[r.IntN(len(ids))]
	}
	return q
}

func filledHot(ids []uint64) *hot.Table {
	tb := hot.New(4)
	for _, id := range ids {
		tb.Add(id, 0, 1)
	}
	return tb
}

func filledMap(ids []uint64) map[uint64][4]uint32 {
	m := make(map[uint64][4]uint32)
	for _, id := range ids {
		c := m[id]
		c[0]++
		m[id] = c
	}
	return m
}

// randomBench runs hot and map sub-benchmarks at each of randomSizes, both tables built
// (as filled, in time order) before either runs, each reporting the heap it holds.
func randomBench(b *testing.B, hotOp func(tb *hot.Table, q []uint64, n int), mapOp func(m map[uint64][4]uint32, q []uint64, n int)) {
	for _, size := range randomSizes() {
		ids := arrivals(size.n, size.spanMS)
		q := randomIDs(ids)
		before := heapNow()
		tb := filledHot(ids)
		hotB := float64(heapNow()-before) / float64(size.n)
		before = heapNow()
		m := filledMap(ids)
		mapB := float64(heapNow()-before) / float64(size.n)
		b.Run(size.name+"/hot", func(b *testing.B) {
			b.ReportAllocs()
			b.ResetTimer()
			hotOp(tb, q, b.N)
			b.ReportMetric(hotB, "B/id")
		})
		b.Run(size.name+"/map", func(b *testing.B) {
			b.ReportAllocs()
			b.ResetTimer()
			mapOp(m, q, b.N)
			b.ReportMetric(mapB, "B/id")
		})
		runtime.KeepAlive(tb)
		runtime.KeepAlive(m)
	}
}

// BenchmarkIncrementExisting adds to a random existing id of 1 M and of 10 M.
func BenchmarkIncrementExisting(b *testing.B) {
	randomBench(b, func(tb *hot.Table, q []uint64, n int) {
		for i := range n {
			tb.Add(q[i&(len(q)-1)], i&3, 1)
		}
	}, func(m map[uint64][4]uint32, q []uint64, n int) {
		for i := range n {
			id := q[i&(len(q)-1)]
			c := m[id]
			c[i&3]++
			m[id] = c
		}
	})
}

// heapNow is the live heap after a collection.
func heapNow() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkInsertNew inserts ids in time order (3 a millisecond) into an empty table and
// reports the heap each id takes.
func BenchmarkInsertNew(b *testing.B) {
	b.Run("hot", func(b *testing.B) {
		ids := snowflakes(b.N, uint64(b.N)/3+1)
		before := heapNow()
		b.ReportAllocs()
		b.ResetTimer()
		tb := hot.New(4)
		for _, id := range ids {
			tb.Add(id, 0, 1)
		}
		b.StopTimer()
		b.ReportMetric(float64(heapNow()-before)/float64(b.N), "B/id")
		runtime.KeepAlive(tb)
		runtime.KeepAlive(ids)
	})
	b.Run("map", func(b *testing.B) {
		ids := snowflakes(b.N, uint64(b.N)/3+1)
		before := heapNow()
		b.ReportAllocs()
		b.ResetTimer()
		m := make(map[uint64][4]uint32)
		for _, id := range ids {
			c := m[id]
			c[0]++
			m[id] = c
		}
		b.StopTimer()
		b.ReportMetric(float64(heapNow()-before)/float64(b.N), "B/id")
		runtime.KeepAlive(m)
		runtime.KeepAlive(ids)
	})
}

// BenchmarkLookup reads a random existing id of 1 M and of 10 M.
func BenchmarkLookup(b *testing.B) {
	randomBench(b, func(tb *hot.Table, q []uint64, n int) {
		dst := make([]uint64, 4)
		for i := range n {
			tb.Get(q[i&(len(q)-1)], dst)
		}
	}, func(m map[uint64][4]uint32, q []uint64, n int) {
		var sink uint32
		for i := range n {
			sink += m[q[i&(len(q)-1)]][0]
		}
		_ = sink
	})
}
