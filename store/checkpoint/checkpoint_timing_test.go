package checkpoint_test

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/tally-dev/tally/store/checkpoint"
	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/delivery"
)

// BenchmarkColdTier stores 1 M post counters (snowflake ids over 30 days, four counters,
// a few views to a few thousand) the way checkpoints do, reopens the database and
// reports its disk use per id and the latency of reading one random id — what a cold
// read costs — beside a Go map lookup of the same ids (the hot path's lower bound).
// Run: go test ./store/checkpoint -run XXX -bench ColdTier -benchtime 1x
func BenchmarkColdTier(b *testing.B) {
	n := 1_000_000
	dir := b.TempDir()
	db, err := cold.Open(cold.Options{Dir: dir})
	if err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	ids := make([]uint64, n)
	ref := make(map[uint64][4]uint64, n)
	const epoch = 1_700_000_000_000
	cp := &checkpoint.Checkpoint{Marks: map[uint32]*delivery.Mark{}}
	var batch []checkpoint.Entry
	for i := range ids {
		ms := epoch + uint64(i)*30*24*3600*1000/uint64(n)
		ids[i] = ms<<22 | uint64(r.IntN(1024))<<12 | uint64(i%4096)
		c := [4]uint64{uint64(r.IntN(50)), uint64(r.IntN(5)), uint64(r.IntN(10)), uint64(r.IntN(5000))}
		ref[ids[i]] = c
		batch = append(batch, checkpoint.Entry{ID: ids[i], Counts: c[:]})
		if len(batch) == 8192 || i == n-1 {
			if err := checkpoint.SaveCounters(db, "post", 0, batch, cp, checkpoint.Journal{}); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	if err := db.Close(); err != nil {
		b.Fatal(err)
	}
	if db, err = cold.Open(cold.Options{Dir: dir}); err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	lsm, vlog := db.Size()
	out := [][]uint64{make([]uint64, 4)}
	var coldT, hot []time.Duration
	for b.Loop() {
		for range 100_000 {
			id := ids[r.IntN(n)]
			start := time.Now()
			if err := checkpoint.Counts(db, "post", 0, []uint64{id}, out); err != nil {
				b.Fatal(err)
			}
			coldT = append(coldT, time.Since(start))
			start = time.Now()
			c := ref[id]
			hot = append(hot, time.Since(start))
			if out[0][3] != c[3] {
				b.Fatalf("id %d: %v, want %v", id, out[0], c)
			}
		}
	}
	q := func(d []time.Duration, p float64) float64 {
		slices.Sort(d)
		return float64(d[int(p*float64(len(d)-1))].Nanoseconds()) / 1e3
	}
	b.ReportMetric(float64(lsm+vlog)/float64(n), "disk-B/id")
	b.ReportMetric(q(coldT, 0.5), "cold-p50-µs")
	b.ReportMetric(q(coldT, 0.99), "cold-p99-µs")
	b.ReportMetric(q(hot, 0.5), "map-p50-µs")
	b.ReportMetric(q(hot, 0.99), "map-p99-µs")
}
