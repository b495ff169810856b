package systest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/stages/node"
	"github.com/tally-dev/tally/stages/systest/rig"
)

func TestLikesEndToEnd(t *testing.T) {
	_, c := rig.StartNode(t, nil)
	ctx := context.Background()
	evs := []pipeline.Event{
		{Type: "like", UID: 1, Post: 100, Owner: 9, Tx: "a"},
		{Type: "like", UID: 1, Post: 100, Owner: 9, Tx: "b"}, // likes twice: no change
		{Type: "like", UID: 2, Post: 100, Owner: 9, Tx: "c"},
		{Type: "like", UID: 2, Post: 100, Owner: 9, Tx: "c"}, // re-sent: dropped by dedup
		{Type: "unlike", UID: 3, Post: 100, Tx: "d"},         // unlike of nothing
		{Type: "view", Post: 100, N: 5, Tx: "e"},
		{Type: "repost", UID: 2, Post: 100, Tx: "f"},
		{Type: "comment", UID: 3, Post: 100, Comment: 7, Owner: 9, Tx: "g"},
	}
	if err := c.Publish(ctx, evs...); err != nil {
		t.Fatal(err)
	}
	rig.Eventually(t, "counts of post 100", func() (bool, string) {
		r, err := c.Get(ctx, "post", 100, 101)
		if err != nil {
			return false, err.Error()
		}
		got := r.Counts
		return len(got) == 2 && got[0][0] == 2 && got[0][1] == 1 && got[0][2] == 1 && got[0][3] == 5 && got[1][0] == 0,
			pipeline.ID(0).String() + " " + fmtCounts(got)
	})
	liked, err := c.Liked(ctx, 1, 100, 101)
	if err != nil || !liked[0] || liked[1] {
		t.Fatalf("liked = %v %v", liked, err)
	}
	// The notifications reach the owner's partition as a hop batch, after the counts or before.
	rig.Eventually(t, "unread of the owner", func() (bool, string) {
		un, err := c.Unread(ctx, 9)
		if err != nil {
			return false, err.Error()
		}
		return un.Like == 2 && un.Comment == 1, fmt.Sprintf("%+v", un)
	})
	page, err := c.List(ctx, client.LikesOfPost, 100, 10, "")
	if err != nil || len(page.IDs) != 2 {
		t.Fatalf("likers page = %+v %v", page, err)
	}
	// 4 partitions: 4 event stages and 3 families × 4 counter workers are checked.
	h, err := c.Health(ctx)
	if err != nil || h.Partitions != 4 || h.Checked != 16 {
		t.Fatalf("health = %+v %v, want partitions 4, checked 16", h, err)
	}
}

func fmtCounts(c [][]uint64) string {
	s := ""
	for _, r := range c {
		for _, v := range r {
			s += " " + pipeline.ID(v).String()
		}
		s += ";"
	}
	return s
}

// Checkpointed deltas are purged, so the deltas stream holds only what is not yet
// checkpointed; counts survive a restart after the purge.
func TestDeltasPurgedAfterCheckpoint(t *testing.T) {
	dir := t.TempDir()
	mod := func(c *node.Config) { c.DataDir = dir; c.PurgeEvery = time.Millisecond }
	n, c := rig.StartNode(t, mod)
	ctx := context.Background()
	var evs []pipeline.Event
	for i := range 500 {
		evs = append(evs, pipeline.Event{Type: "view", Post: pipeline.ID(1 + i%50), N: 2})
	}
	if err := c.PublishBatch(ctx, "purge", evs); err != nil {
		t.Fatal(err)
	}
	nc, _ := nats.Connect(n.ClientURL())
	defer nc.Close()
	js, _ := jetstream.New(nc)
	rig.Eventually(t, "deltas stream purged", func() (bool, string) {
		st, err := js.Stream(ctx, c.Subjects().DeltasStream())
		if err != nil {
			return false, err.Error()
		}
		msgs := st.CachedInfo().State.Msgs
		return msgs == 0 && st.CachedInfo().State.LastSeq > 0, fmt.Sprint(msgs, " messages")
	})
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	_, c2 := rig.StartNode(t, mod)
	r, err := c2.Get(ctx, "post", 1, 50)
	if err != nil || r.Counts[0][3] != 20 || r.Counts[1][3] != 20 {
		t.Fatalf("after restart: %v %v", r.Counts, err)
	}
}
