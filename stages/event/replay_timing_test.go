package event

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/natstest"
)

// BenchmarkReplay is how fast a new owner on an empty state replays a partition's log of
// b.N events (70 % likes of 20 000 posts by 100 000 users, 30 % views, in batches of
// 500): with the records carrying their transactions' writes, applied from them
// (writes, as with --standbys), and without, each record's events executed again
// (events). Run: go test ./stages/event -run XXX -bench Replay -benchtime 200000x
func BenchmarkReplay(b *testing.B) {
	for _, c := range []struct {
		name   string
		writes bool
	}{{"writes", true}, {"events", false}} {
		b.Run(c.name, func(b *testing.B) {
			h := newHarness(b, 1)
			h.logWrites = c.writes
			a := h.start("a.1", nil)
			r := rand.New(rand.NewPCG(1, 2))
			batch := make([]pipeline.Event, 0, 500)
			for i := range b.N {
				post := pipeline.ID(1 + r.IntN(20_000))
				e := pipeline.Event{Type: pipeline.TypeView, Post: post, N: 1}
				if r.IntN(10) < 7 {
					e = pipeline.Event{Type: pipeline.TypeLike, UID: pipeline.ID(1 + r.IntN(100_000)), Post: post, Owner: pipeline.ID(1 + uint64(post)%100_000)}
				}
				if batch = append(batch, e); len(batch) == cap(batch) || i == b.N-1 {
					h.publishBatch(batch)
					batch = batch[:0]
				}
			}
			waitSettled(b, a, time.Minute)
			if err := a.stop(); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			n := h.start("b.1", nil)
			waitSettled(b, n, 5*time.Minute)
			b.StopTimer()
			if c.writes && n.stats.ReplayedWrites.Load() == 0 {
				b.Fatal("no record replayed from its writes")
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(float64(a.stats.Txns.Load()), "records")
		})
	}
}

// waitSettled waits until r has applied its whole stream and its outbox is settled.
func waitSettled(b *testing.B, r *runningStage, timeout time.Duration) {
	natstest.Eventually(b, timeout, "stage caught up and settled", func() (bool, string) {
		lag, err := r.Lag(b.Context())
		return err == nil && lag == 0 && !r.busy.Load(), "behind"
	})
}
