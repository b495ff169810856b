package hot_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/tally-dev/tally/store/hot"
)

// BenchmarkDirty is a checkpoint's walk of the ids changed since the last (Dirty, then
// ClearDirty) in a table of 1 M and 10 M ids, after 1 000 and 10 000 changes at random:
// what a counter partition does at every flush (100 ms). Its cost should follow the ids
// changed, not the table's size.
// Run: go test ./store/hot -run XXX -bench Dirty
func BenchmarkDirty(b *testing.B) {
	// 1 M ids made over 180 days (ColdAge's default): ~59 000 groups of ~17 ids each.
	sizes := append(randomSizes(), struct {
		name   string
		n      int
		spanMS uint64
	}{"1M-180d", 1_000_000, 180 * 24 * 3_600_000})
	for _, size := range sizes {
		ids := arrivals(size.n, size.spanMS)
		tb := hot.New(4)
		for _, id := range ids {
			tb.Add(id, 0, 1)
		}
		for _, changed := range []int{1_000, 10_000} {
			b.Run(fmt.Sprintf("%s/%d", size.name, changed), func(b *testing.B) {
				r := rand.New(rand.NewPCG(1, 2))
				seen := 0
				for range b.N {
					b.StopTimer()
					for range changed {
						tb.Add(ids[r.IntN(len(ids))], 1, 1)
					}
					b.StartTimer()
					tb.Dirty(func(uint64, []uint64) bool { seen++; return true })
					tb.ClearDirty()
				}
				if seen == 0 {
					b.Fatal("no id reported dirty")
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(seen), "ns/changed-id")
			})
		}
	}
}

// BenchmarkMemBytes is the table's accounting of its RAM, which a counter partition asks
// for after every checkpoint (100 ms), here after 1 000 changes at random, in a table of
// 1 M ids made over 180 days (~59 000 groups): it should cost what changed, not what the
// table holds.
// Run: go test ./store/hot -run XXX -bench MemBytes
func BenchmarkMemBytes(b *testing.B) {
	ids := arrivals(1_000_000, 180*24*3_600_000)
	tb := hot.New(4)
	for _, id := range ids {
		tb.Add(id, 0, 1)
	}
	tb.ClearDirty()
	tb.MemBytes()
	r := rand.New(rand.NewPCG(1, 2))
	n := 0
	for b.Loop() {
		b.StopTimer()
		for range 1_000 {
			tb.Add(ids[r.IntN(len(ids))], 1, 1)
		}
		tb.Dirty(func(uint64, []uint64) bool { return true })
		tb.ClearDirty()
		b.StartTimer()
		n += tb.MemBytes()
	}
	if n == 0 {
		b.Fatal("no bytes")
	}
}
