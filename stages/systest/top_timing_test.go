package systest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/stages/node"
	"github.com/tally-dev/tally/stages/systest/rig"
)

// BenchmarkTop is the latency of a top 100 by likes over the hour (tally.top.post) on one
// tallyd of 16 partitions whose posts were liked in the last minutes — 20 000 and 100 000
// of them — and on two sharing them (20 000-two), beside a 20-id get of the same posts
// asked in turn, in the same run, and the CPU of the two (the whole process). Each
// partition ranks every post it holds changes of, per request.
// Run: go test ./stages/systest -run XXX -bench Top -benchtime 300x
func BenchmarkTop(b *testing.B) {
	one := func(b *testing.B) *client.Client {
		_, c := rig.StartNode(b, func(c *node.Config) { c.Partitions, c.FlushInterval = 16, 100*time.Millisecond })
		return c
	}
	for _, run := range []struct {
		name   string
		posts  int
		tallyd func(*testing.B) *client.Client
	}{{"20000", 20_000, one}, {"100000", 100_000, one}, {"20000-two", 20_000, twoTallyd}} {
		posts := run.posts
		b.Run(run.name, func(b *testing.B) {
			c := run.tallyd(b)
			ctx := context.Background()
			r := rand.New(rand.NewPCG(1, 2))
			evs := make([]pipeline.Event, 0, 3*posts)
			for range 3 * posts {
				evs = append(evs, pipeline.Event{Type: "like", UID: pipeline.ID(1 + r.IntN(1_000_000)), Post: pipeline.ID(1 + r.IntN(posts))})
			}
			for i := 0; i < len(evs); i += pipeline.MaxBatch {
				if err := c.PublishBatch(ctx, fmt.Sprint("b", i), evs[i:min(i+pipeline.MaxBatch, len(evs))]); err != nil {
					b.Fatal(err)
				}
			}
			rig.WaitCaughtUp(b, c)
			ids := make([]uint64, 20)
			var top, get []time.Duration
			b.ResetTimer()
			cpu := cpuTime()
			for i := range b.N {
				start := time.Now()
				t, err := c.Top(ctx, "post", "like", "1h", 100)
				if err != nil || len(t.IDs) != 100 {
					b.Fatalf("top: %v, %d ids", err, len(t.IDs))
				}
				top = append(top, time.Since(start))
				for j := range ids {
					ids[j] = uint64(1 + (i*20+j)%posts)
				}
				start = time.Now()
				if _, err := c.Get(ctx, "post", ids...); err != nil {
					b.Fatal(err)
				}
				get = append(get, time.Since(start))
			}
			b.StopTimer()
			b.ReportMetric(float64((cpuTime()-cpu).Nanoseconds())/1e3/float64(b.N), "cpu-µs/op")
			slices.Sort(top)
			slices.Sort(get)
			b.ReportMetric(float64(top[len(top)/2].Microseconds()), "top-p50-µs")
			b.ReportMetric(float64(top[len(top)*99/100].Microseconds()), "top-p99-µs")
			b.ReportMetric(float64(get[len(get)/2].Microseconds()), "get20-p50-µs")
			b.ReportMetric(float64(get[len(get)*99/100].Microseconds()), "get20-p99-µs")
		})
	}
}

// BenchmarkLikers is the latency and CPU (the whole process) of a page of 20 of a post's
// likers (tally.likes.post: every event partition asked, the pages merged newest
// first), on one tallyd of 16 partitions and on two sharing them (one-two), after 60 000
// likes of 2 000 posts by 100 000 users.
// Run: go test ./stages/systest -run XXX -bench Likers -benchtime 5000x
func BenchmarkLikers(b *testing.B) {
	one := func(b *testing.B) *client.Client {
		_, c := rig.StartNode(b, func(c *node.Config) { c.Partitions = 16 })
		return c
	}
	for _, run := range []struct {
		name   string
		tallyd func(*testing.B) *client.Client
	}{{"one", one}, {"two", twoTallyd}} {
		b.Run(run.name, func(b *testing.B) {
			c := run.tallyd(b)
			ctx := context.Background()
			r := rand.New(rand.NewPCG(3, 4))
			const posts = 2_000
			evs := make([]pipeline.Event, 0, 60_000)
			for range cap(evs) {
				evs = append(evs, pipeline.Event{Type: "like", UID: pipeline.ID(1 + r.IntN(100_000)), Post: pipeline.ID(1 + r.IntN(posts))})
			}
			for i := 0; i < len(evs); i += pipeline.MaxBatch {
				if err := c.PublishBatch(ctx, fmt.Sprint("b", i), evs[i:min(i+pipeline.MaxBatch, len(evs))]); err != nil {
					b.Fatal(err)
				}
			}
			rig.WaitCaughtUp(b, c)
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			cpu := cpuTime()
			for i := range b.N {
				start := time.Now()
				p, err := c.List(ctx, client.LikesOfPost, uint64(1+i%posts), 20, "")
				if err != nil || len(p.IDs) == 0 {
					b.Fatalf("likers: %v, %v", err, p)
				}
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			b.ReportMetric(float64((cpuTime()-cpu).Nanoseconds())/1e3/float64(b.N), "cpu-µs/page")
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}
