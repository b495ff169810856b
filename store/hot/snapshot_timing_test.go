package hot_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/tally-dev/tally/store/hot"
)

// BenchmarkSnapshot writes and loads a snapshot of 1 M ids spread over 30 days, the
// restart path of a counter partition; it reports ns per id for each direction.
func BenchmarkSnapshot(b *testing.B) {
	const n = 1 << 20
	t := hot.New(4)
	counts := []uint64{1, 2, 0, 70000}
	for i, id := range snowflakes(n, 30*24*3600*1000) {
		counts[0] = uint64(i % 300)
		t.Put(id, counts)
	}
	t.Compact()
	var buf bytes.Buffer
	var write, read time.Duration
	size := 0
	for b.Loop() {
		buf.Reset()
		start := time.Now()
		if _, err := t.WriteTo(&buf); err != nil {
			b.Fatal(err)
		}
		write += time.Since(start)
		size = buf.Len()
		start = time.Now()
		u := hot.New(4)
		if _, err := u.ReadFrom(&buf); err != nil {
			b.Fatal(err)
		}
		read += time.Since(start)
		if u.Len() != t.Len() {
			b.Fatalf("loaded %d ids, want %d", u.Len(), t.Len())
		}
	}
	b.ReportMetric(float64(write.Nanoseconds())/float64(b.N*n), "write-ns/id")
	b.ReportMetric(float64(read.Nanoseconds())/float64(b.N*n), "read-ns/id")
	b.ReportMetric(float64(size)/n, "B/id")
}
