package hot_test

import (
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/tally-dev/tally/store/hot"
)

const benchIDs = 1_000_000

func benchSetup() ([]uint64, []int) {
	ids := snowflakes(benchIDs, 600_000)
	r := rand.New(rand.NewPCG(3, 4))
	order := make([]int, 1<<20)
	for i := range order {
		order[i] = r.IntN(benchIDs)
	}
	return ids, order
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

// BenchmarkIncrementExisting adds to a random existing id of 1 M.
func BenchmarkIncrementExisting(b *testing.B) {
	ids, order := benchSetup()
	b.Run("hot", func(b *testing.B) {
		tb := filledHot(ids)
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			tb.Add(ids[order[i&(len(order)-1)]], i&3, 1)
		}
	})
	b.Run("map", func(b *testing.B) {
		m := filledMap(ids)
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			id := ids[order[i&(len(order)-1)]]
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

// BenchmarkLookup reads a random existing id of 1 M.
func BenchmarkLookup(b *testing.B) {
	ids, order := benchSetup()
	b.Run("hot", func(b *testing.B) {
		tb := filledHot(ids)
		dst := make([]uint64, 4)
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			tb.Get(ids[order[i&(len(order)-1)]], dst)
		}
	})
	b.Run("map", func(b *testing.B) {
		m := filledMap(ids)
		var sink uint32
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			sink += m[ids[order[i&(len(order)-1)]]][0]
		}
		_ = sink
	})
}
