package cold_test

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/delivery"
)

// BenchmarkColdTier stores 1 M post counters (snowflake ids over 30 days, four counters,
// a few views to a few thousand) the way checkpoints do, reopens the database and
// reports its disk use per id and the latency of reading one random id — what a cold
// read costs — beside a Go map lookup of the same ids (the hot path's lower bound).
// Run: go test ./store/cold -run XXX -bench ColdTier -benchtime 1x
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
	cp := &cold.Checkpoint{Marks: map[uint32]*delivery.Mark{}}
	var batch []cold.Entry
	for i := range ids {
		ms := epoch + uint64(i)*30*24*3600*1000/uint64(n)
		ids[i] = ms<<22 | uint64(r.IntN(1024))<<12 | uint64(i%4096)
		c := [4]uint64{uint64(r.IntN(50)), uint64(r.IntN(5)), uint64(r.IntN(10)), uint64(r.IntN(5000))}
		ref[ids[i]] = c
		batch = append(batch, cold.Entry{ID: ids[i], Counts: c[:]})
		if len(batch) == 8192 || i == n-1 {
			if err := cold.SaveCounters(db, "post", 0, batch, cp, cold.Journal{}); err != nil {
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
			if err := cold.Counts(db, "post", 0, []uint64{id}, out); err != nil {
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

// BenchmarkPartMove backs up one counter partition of 1 M ids (what a hand-over stores in
// NATS) and restores it into another live database (what the next owner does), reporting
// the backup's bytes and the time of each per id, beside writing the same ids the way
// checkpoints do (the baseline: filling the partition in the first place).
// Run: go test ./store/cold -run XXX -bench PartMove -benchtime 1x
func BenchmarkPartMove(b *testing.B) {
	const n = 1_000_000
	src, err := cold.Open(cold.Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	r := rand.New(rand.NewPCG(3, 4))
	cp := &cold.Checkpoint{Marks: map[uint32]*delivery.Mark{}}
	batch := make([]cold.Entry, 0, 8192)
	start := time.Now()
	for i := range n {
		batch = append(batch, cold.Entry{ID: uint64(1_700_000_000_000)<<22 | uint64(i)<<12, Counts: []uint64{uint64(r.IntN(50)), uint64(r.IntN(5)), uint64(r.IntN(10)), uint64(r.IntN(5000))}})
		if len(batch) == cap(batch) || i == n-1 {
			if err := cold.SaveCounters(src, "post", 3, batch, cp, cold.Journal{}); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	fill := time.Since(start)
	part := cold.CounterPart([]string{"post"}, 3)
	var backup, restore time.Duration
	var size int
	for b.Loop() {
		var buf bytes.Buffer
		start := time.Now()
		if err := src.Backup(&buf, part); err != nil {
			b.Fatal(err)
		}
		backup, size = time.Since(start), buf.Len()
		dst, err := cold.Open(cold.Options{Dir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		start = time.Now()
		if err := dst.Restore(&buf, part, b.TempDir()); err != nil {
			b.Fatal(err)
		}
		restore = time.Since(start)
		for i := 0; i < n; i += 9973 { // the restored partition holds what the original does
			id := []uint64{uint64(1_700_000_000_000)<<22 | uint64(i)<<12}
			want, got := [][]uint64{make([]uint64, 4)}, [][]uint64{make([]uint64, 4)}
			if cold.Counts(src, "post", 3, id, want) != nil || cold.Counts(dst, "post", 3, id, got) != nil || !slices.Equal(want[0], got[0]) {
				b.Fatalf("id %d restored as %v, want %v", id[0], got[0], want[0])
			}
		}
		dst.Close()
	}
	b.ReportMetric(float64(size)/n, "backup-B/id")
	b.ReportMetric(float64(backup.Nanoseconds())/n, "backup-ns/id")
	b.ReportMetric(float64(restore.Nanoseconds())/n, "restore-ns/id")
	b.ReportMetric(float64(fill.Nanoseconds())/n, "checkpoint-fill-ns/id")
}
