package systest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/stages/node"
	"github.com/tally-dev/tally/stages/systest/rig"
)

// BenchmarkFanout is posts applied per second by an author with 10 000 followers: pushed
// (each post adds to 10 000 feed counters) beside pulled (the same author above the
// fan-out limit: one write per post).
// Run: go test ./stages/systest -run XXX -bench Fanout -benchtime 200x
func BenchmarkFanout(b *testing.B) {
	const followers = 10_000
	for _, mode := range []struct {
		name  string
		limit int
	}{{"pushed", followers}, {"pulled", followers - 1}} {
		b.Run(mode.name, func(b *testing.B) {
			_, c := rig.StartNode(b, func(c *node.Config) { c.Partitions = 16; c.FanoutLimit = mode.limit })
			ctx := context.Background()
			follows := make([]pipeline.Event, followers)
			for i := range follows {
				follows[i] = pipeline.Event{Type: "follow", UID: pipeline.ID(10 + i), Target: 1, TS: 1}
			}
			if err := c.PublishBatch(ctx, "follows", follows); err != nil {
				b.Fatal(err)
			}
			rig.WaitCaughtUp(b, c)
			posts := make([]pipeline.Event, b.N)
			for i := range posts {
				posts[i] = pipeline.Event{Type: "post", UID: 1, Post: pipeline.ID(1<<40 + i), TS: int64(10 + i)}
			}
			b.ResetTimer()
			for i := 0; i < len(posts); i += 100 {
				if err := c.PublishBatch(ctx, fmt.Sprint("posts.", i), posts[i:min(i+100, len(posts))]); err != nil {
					b.Fatal(err)
				}
			}
			rig.WaitCaughtUp(b, c)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "posts/s")
			un, err := c.Unread(ctx, 10+followers/2)
			if err != nil || un.Feed != uint64(b.N) {
				b.Fatalf("a follower's feed unread = %d (%v), want %d", un.Feed, err, b.N)
			}
		})
	}
}

// BenchmarkUnread2000 is the latency of tally.unread for a reader following 2 000
// accounts (20 of them pulled celebrities), beside a reader following nobody.
// Run: go test ./stages/systest -run XXX -bench Unread2000 -benchtime 5000x
func BenchmarkUnread2000(b *testing.B) {
	_, c := rig.StartNode(b, func(c *node.Config) { c.Partitions = 16; c.FanoutLimit = 1 })
	ctx := context.Background()
	const reader, loner, authors = 1, 2, 2000
	var evs []pipeline.Event
	for a := range authors {
		author := pipeline.ID(100 + a)
		evs = append(evs, pipeline.Event{Type: "follow", UID: reader, Target: author, TS: 1})
		if a%100 == 0 { // a second follower puts the author above the limit: pulled
			evs = append(evs, pipeline.Event{Type: "follow", UID: 3, Target: author, TS: 1})
		}
	}
	if err := c.PublishBatch(ctx, "follows", evs); err != nil {
		b.Fatal(err)
	}
	rig.WaitCaughtUp(b, c)
	evs = evs[:0]
	for a := range authors {
		evs = append(evs, pipeline.Event{Type: "post", UID: pipeline.ID(100 + a), Post: pipeline.ID(1<<40 + a), TS: 5})
	}
	if err := c.PublishBatch(ctx, "posts", evs); err != nil {
		b.Fatal(err)
	}
	rig.WaitCaughtUp(b, c)
	for _, who := range []struct {
		name string
		uid  uint64
		feed uint64
	}{{"follows-2000", reader, authors}, {"follows-none", loner, 0}} {
		b.Run(who.name, func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			for range b.N {
				t0 := time.Now()
				un, err := c.Unread(ctx, who.uid)
				lat = append(lat, time.Since(t0))
				if err != nil || un.Feed != who.feed {
					b.Fatalf("feed unread %d (%v), want %d", un.Feed, err, who.feed)
				}
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}
