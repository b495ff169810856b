package cold_test

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/tally-dev/tally/store/checkpoint"
	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/delivery"
)

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
	cp := &checkpoint.Checkpoint{Marks: map[uint32]*delivery.Mark{}}
	batch := make([]checkpoint.Entry, 0, 8192)
	start := time.Now()
	for i := range n {
		batch = append(batch, checkpoint.Entry{ID: uint64(1_700_000_000_000)<<22 | uint64(i)<<12, Counts: []uint64{uint64(r.IntN(50)), uint64(r.IntN(5)), uint64(r.IntN(10)), uint64(r.IntN(5000))}})
		if len(batch) == cap(batch) || i == n-1 {
			if err := checkpoint.SaveCounters(src, "post", 3, batch, cp, checkpoint.Journal{}); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	fill := time.Since(start)
	ks := cold.CounterKeys([]string{"post"}, 3)
	var backup, restore time.Duration
	var size int
	for b.Loop() {
		var buf bytes.Buffer
		start := time.Now()
		if err := src.Backup(&buf, ks); err != nil {
			b.Fatal(err)
		}
		backup, size = time.Since(start), buf.Len()
		dst, err := cold.Open(cold.Options{Dir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		start = time.Now()
		if err := dst.Restore(&buf, ks, b.TempDir()); err != nil {
			b.Fatal(err)
		}
		restore = time.Since(start)
		for i := 0; i < n; i += 9973 { // the restored partition holds what the original does
			id := []uint64{uint64(1_700_000_000_000)<<22 | uint64(i)<<12}
			want, got := [][]uint64{make([]uint64, 4)}, [][]uint64{make([]uint64, 4)}
			if checkpoint.Counts(src, "post", 3, id, want) != nil || checkpoint.Counts(dst, "post", 3, id, got) != nil || !slices.Equal(want[0], got[0]) {
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
