package systest

import (
	"context"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/stages/node"
	"github.com/tally-dev/tally/stages/systest/rig"
)

// TestUnreadByStreamOrder holds one partition back (a backlog published into it first)
// so that events stored before others are applied after them, across partitions: a
// like, a comment, a mention and a system notice stored before the read that covers
// them; a read stored before a like, handed over late from another partition's batch;
// follows, posts, reads and unfollows all in the same millisecond, pushed and pulled.
// Every user's unread must equal the stream's order, replayed from the stored events.
func TestUnreadByStreamOrder(t *testing.T) {
	const parts = 4
	_, c := rig.StartNode(t, func(c *node.Config) { c.Partitions = parts; c.FanoutLimit = 3 })
	ctx := context.Background()
	js, _ := jetstream.New(c.Conn())
	in := func(p int, from uint64) uint64 { return idIn(parts, p, from) }
	const slow = 1 // the partition held back
	owner, reader, author := in(0, 10), in(0, 20), in(slow, 30)
	racer, celeb := in(2, 40), in(slow, 50) // celeb: more followers than the limit
	liker, liker2, actor := in(slow, 60), in(0, 70), in(slow, 80)
	fans := []uint64{in(2, 100), in(3, 100), in(2, 200), in(3, 200)}
	users := append([]uint64{owner, reader, author, racer, celeb, liker, liker2, actor}, fans...)
	const ts = 7 // every event in the same millisecond
	tx := 0
	single := func(e pipeline.Event) {
		t.Helper()
		tx++
		e.TS, e.Tx = ts, fmt.Sprint("ord.", tx)
		if err := c.Publish(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	raw := func(key uint64, evs ...pipeline.Event) { // one unsplit batch, applied where key lands
		t.Helper()
		tx++
		for i := range evs {
			evs[i].TS = ts
		}
		publishUnsplit(t, js, c.Subjects(), pipeline.ID(key), fmt.Sprint("ord.", tx), evs)
	}
	backlog := func() { // views of posts of the slow partition, published without waiting
		t.Helper()
		post := in(slow, 1<<40)
		for range 8 {
			views := make([]pipeline.Event, 5000)
			for i := range views {
				views[i] = pipeline.Event{Type: "view", Post: pipeline.ID(post), N: 1}
			}
			raw(post, views...)
		}
	}
	// Followers first, settled: the celebrity's are above the limit, the author's not.
	for i, f := range fans {
		single(pipeline.Event{Type: "follow", UID: pipeline.ID(f), Target: pipeline.ID(celeb)})
		if i < 2 {
			single(pipeline.Event{Type: "follow", UID: pipeline.ID(f), Target: pipeline.ID(author)})
		}
	}
	rig.WaitCaughtUp(t, c)

	for round := range 3 {
		backlog()
		post := pipeline.ID(1<<41 + round*100)
		// Stored in the slow partition before the reads below, applied after them.
		single(pipeline.Event{Type: "like", UID: pipeline.ID(liker), Post: post, Owner: pipeline.ID(owner)})
		single(pipeline.Event{Type: "comment", UID: pipeline.ID(liker), Post: post, Comment: pipeline.ID(round + 1), Owner: pipeline.ID(owner)})
		raw(liker, pipeline.Event{Type: "mention", UID: pipeline.ID(actor), Target: pipeline.ID(owner)},
			pipeline.Event{Type: "system", ID: 1})
		single(pipeline.Event{Type: "post", UID: pipeline.ID(author), Post: post + 1})
		single(pipeline.Event{Type: "post", UID: pipeline.ID(celeb), Post: post + 2})
		// A read of the racer stored before a like of theirs, in the slow partition's
		// batch: it reaches the racer's partition after the like.
		raw(liker, pipeline.Event{Type: "read", UID: pipeline.ID(racer), Kinds: []string{"like", "feed"}},
			pipeline.Event{Type: "follow", UID: pipeline.ID(racer), Target: pipeline.ID(author)})
		single(pipeline.Event{Type: "like", UID: pipeline.ID(liker2), Post: post + 3, Owner: pipeline.ID(racer)})
		// The reads, applied at once in their own partitions.
		single(pipeline.Event{Type: "read", UID: pipeline.ID(owner)})
		single(pipeline.Event{Type: "follow", UID: pipeline.ID(reader), Target: pipeline.ID(author)})
		single(pipeline.Event{Type: "follow", UID: pipeline.ID(reader), Target: pipeline.ID(celeb)})
		single(pipeline.Event{Type: "post", UID: pipeline.ID(author), Post: post + 4})
		single(pipeline.Event{Type: "post", UID: pipeline.ID(celeb), Post: post + 5})
		if round == 1 {
			single(pipeline.Event{Type: "read", UID: pipeline.ID(reader), Kinds: []string{"feed"}})
			single(pipeline.Event{Type: "post", UID: pipeline.ID(author), Post: post + 6})
		}
		if round == 2 {
			single(pipeline.Event{Type: "unfollow", UID: pipeline.ID(reader), Target: pipeline.ID(author)})
			single(pipeline.Event{Type: "unfollow", UID: pipeline.ID(fans[0]), Target: pipeline.ID(author)})
		}
		rig.WaitCaughtUp(t, c)
		m := rig.StoredModel(t, c)
		got, err := c.UnreadMany(ctx, users...)
		if err != nil {
			t.Fatal(err)
		}
		for i, u := range users {
			if w := m.Unread(u); got[i] != w {
				t.Errorf("round %d: unread of %d = %+v, stream order %+v", round, u, got[i], w)
			}
		}
		if t.Failed() {
			return
		}
	}
}
