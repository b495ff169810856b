package systest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/natstest"
	"github.com/tally-dev/tally/stages/node"
	"github.com/tally-dev/tally/stages/systest/rig"
)

// limitStream lowers the largest message stream takes (as an operator may, or a server
// with a smaller payload limit does), so that some of Tally's own messages can never be
// stored.
func limitStream(t *testing.T, js jetstream.JetStream, stream string, size int32) {
	t.Helper()
	ctx := context.Background()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.MaxMsgSize = size
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
}

// Issue 22, item 3: a delta batch that can never be stored (larger than the deltas
// stream takes) was replaced by a dead letter and left its number unfilled: the counter
// partition held every later batch from that event partition above the gap, until its
// limit, and then gave the gap up. Now an empty batch fills the number, and what follows
// is applied at once.
func TestUnstorableDeltaBatchFillsItsNumber(t *testing.T) {
	n, c := rig.StartNode(t, func(c *node.Config) { c.Partitions = 1 })
	ctx := context.Background()
	js, err := jetstream.New(c.Conn())
	if err != nil {
		t.Fatal(err)
	}
	limitStream(t, js, c.Subjects().DeltasStream(), 4<<10)
	views := func(tx string, from, k int) {
		t.Helper()
		evs := make([]pipeline.Event, k)
		for i := range evs {
			evs[i] = pipeline.Event{Type: "view", Post: pipeline.ID(from + i)}
		}
		if err := c.PublishBatch(ctx, tx, evs); err != nil {
			t.Fatal(err)
		}
	}
	counted := func(what string, want uint64) {
		t.Helper()
		natstest.Eventually(t, 15*time.Second, what, func() (bool, string) {
			r, err := c.Get(ctx, "post", 1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
			if err != nil {
				return false, err.Error()
			}
			for i, got := range r.Counts {
				if len(got) < 4 || got[3] != want {
					return false, fmt.Sprintf("post %d: %v, want %d views", i+1, got, want)
				}
			}
			return true, ""
		})
	}
	views("small-1", 1, 10)
	counted("the first batch", 1)
	// 1 000 distinct posts: a delta batch of ~10 KiB, which the stream refuses.
	views("large", 1001, 1000)
	natstest.Eventually(t, 15*time.Second, "the large delta batch dead-lettered", func() (bool, string) {
		return n.EventStats.Dead.Load() == 1, fmt.Sprint(n.EventStats.Dead.Load(), " dead letters")
	})
	views("small-2", 1, 10)
	counted("the batch after the dead-lettered one", 2)
	dl := deadLetters(t, js, 1)
	if !strings.Contains(dl[0].Error, "cannot publish d.0.post.0.2") || dl[0].Subject != c.Subjects().Delta("post", 0) {
		t.Fatalf("dead letter: %q on %s", dl[0].Error, dl[0].Subject)
	}
	if gaps := n.CounterStats.Hop.GapsSkipped.Load(); gaps != 0 {
		t.Fatalf("%d gaps given up", gaps)
	}
}

// The same for a hop batch: system notices copied to the other partition in one hop
// batch larger than the events stream takes. The copies are dead-lettered, the empty
// batch that fills the number lets the notices after them through.
func TestUnstorableHopBatchFillsItsNumber(t *testing.T) {
	n, c := rig.StartNode(t, func(c *node.Config) { c.Partitions = 2 })
	ctx := context.Background()
	js, err := jetstream.New(c.Conn())
	if err != nil {
		t.Fatal(err)
	}
	// 200 notices in one admin batch; their copies carry a place and a time more each,
	// which makes the hop batch about twice as large: the stream takes the one, not the
	// other.
	const notices = 200
	sys := func(from, k int) []pipeline.Event {
		evs := make([]pipeline.Event, k)
		for i := range evs {
			evs[i] = pipeline.Event{Type: "system", ID: pipeline.ID(from + i)}
		}
		return evs
	}
	batch, err := pipeline.Marshal(&pipeline.Batch{Events: sys(1, notices)}, false)
	if err != nil {
		t.Fatal(err)
	}
	copies := sys(1, notices)
	for i := range copies {
		copies[i].Seq, copies[i].TS, copies[i].Local = pipeline.SeqOf(1, i), time.Now().UnixMilli(), true
	}
	hop, err := pipeline.Marshal(&pipeline.HopBatch{Source: 1, Seq: 1, Events: copies}, false)
	if err != nil {
		t.Fatal(err)
	}
	limit := (len(batch) + len(hop)) / 2
	if len(hop)-len(batch) < 1000 {
		t.Fatalf("a batch of %d bytes makes a hop batch of %d: too close to set a limit between", len(batch), len(hop))
	}
	limitStream(t, js, c.Subjects().EventsStream(), int32(limit))
	// Notices go in at partition 0; users 1 and 2 are read where they belong.
	var here, there uint64
	for u := uint64(1); here == 0 || there == 0; u++ {
		if pipeline.PartitionOf(pipeline.ID(u), 2) == 0 {
			here = u
		} else {
			there = u
		}
	}
	var key pipeline.ID = 1
	for pipeline.PartitionOf(key, 2) != 0 {
		key++
	}
	publish := func(id string, data []byte) {
		t.Helper()
		if _, err := js.Publish(ctx, c.Subjects().Event("adminbatch", key), data, jetstream.WithMsgID(id)); err != nil {
			t.Fatal(err)
		}
	}
	unread := func(what string, wantHere, wantThere int64) {
		t.Helper()
		natstest.Eventually(t, 15*time.Second, what, func() (bool, string) {
			u, err := c.UnreadMany(ctx, here, there)
			if err != nil {
				return false, err.Error()
			}
			return int64(u[0].System) == wantHere && int64(u[1].System) == wantThere,
				fmt.Sprintf("user %d (partition 0): %d notices, user %d (partition 1): %d; want %d and %d", here, u[0].System, there, u[1].System, wantHere, wantThere)
		})
	}
	publish("large", batch)
	natstest.Eventually(t, 15*time.Second, "the large hop batch dead-lettered", func() (bool, string) {
		return n.EventStats.Dead.Load() == 1, fmt.Sprint(n.EventStats.Dead.Load(), " dead letters")
	})
	small, err := pipeline.Marshal(&pipeline.Batch{Events: sys(notices+1, 1)}, false)
	if err != nil {
		t.Fatal(err)
	}
	publish("small", small)
	unread("the notice after the dead-lettered copies", notices+1, 1)
	dl := deadLetters(t, js, 1)
	if !strings.Contains(dl[0].Error, "cannot publish hop.0.1.1") {
		t.Fatalf("dead letter: %q", dl[0].Error)
	}
	if gaps := n.EventStats.HopGaps.Load(); gaps != 0 {
		t.Fatalf("%d gaps given up", gaps)
	}
}
