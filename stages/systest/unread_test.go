package systest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/stages/node"
	"github.com/tally-dev/tally/stages/systest/rig"
)

// TestUnreadModel runs steps of one kind of event each (follows, posts, notifications,
// reads, system notices), waits until they are applied, and compares every user's six
// unread counts with the reference after every step. User 1 is a celebrity above the
// fan-out limit, so their posts are pulled while others' are pushed. Two tallyd share the
// partitions, each with its own database: a follow, a post, a notification or a read of
// another process's partition reaches it only as a message, and the queries gather.
func TestUnreadModel(t *testing.T) {
	const users, limit = 40, 5
	steps := 60
	if testing.Short() {
		steps = 20
	}
	share := func(c *node.Config) {
		c.Partitions, c.FanoutLimit = 8, limit
		c.Join, c.BackupEvery, c.LeaseTTL = true, 300*time.Millisecond, time.Second
	}
	n, c := rig.StartNode(t, share)
	second, _ := rig.StartNode(t, func(c *node.Config) { share(c); c.NATSURL = n.ClientURL() })
	rig.Eventually(t, "the partitions spread over two processes", func() (bool, string) {
		return len(n.Parts()) == 4 && len(second.Parts()) == 4, fmt.Sprint(n.Parts(), second.Parts())
	})
	ctx := context.Background()
	r := rand.New(rand.NewPCG(5, 6))
	follows := map[[2]uint64]bool{} // what the workload made, to undo some of it
	ts := int64(1_000_000)
	uid := func() pipeline.ID { return pipeline.ID(1 + r.IntN(users)) }
	other := func(u pipeline.ID) pipeline.ID { return u%users + 1 }
	run := func(step int, evs []pipeline.Event) {
		t.Helper()
		for i, e := range evs {
			ts++
			evs[i].TS = ts
			switch e.Type {
			case "follow":
				follows[[2]uint64{uint64(e.UID), uint64(e.Target)}] = true
			case "unfollow":
				delete(follows, [2]uint64{uint64(e.UID), uint64(e.Target)})
			}
		}
		if err := c.PublishBatch(ctx, fmt.Sprint("step.", step), evs); err != nil {
			t.Fatal(err)
		}
		rig.WaitCaughtUp(t, c)
		ids := make([]uint64, users)
		for i := range ids {
			ids[i] = uint64(i + 1)
		}
		got := unreadMany(t, c, ids)
		ref := rig.StoredModel(t, c)
		for i, u := range ids {
			if w := ref.Unread(u); got[i] != w {
				t.Fatalf("step %d (%s): unread of %d = %+v, reference %+v", step, evs[0].Type, u, got[i], w)
			}
		}
	}
	// The celebrity: more followers than the fan-out limit.
	var setup []pipeline.Event
	for u := 2; u <= 3*limit; u++ {
		setup = append(setup, pipeline.Event{Type: "follow", UID: pipeline.ID(u), Target: 1})
	}
	run(0, setup)
	for step := 1; step <= steps; step++ {
		var evs []pipeline.Event
		switch kind := r.IntN(5); kind {
		case 0:
			for range 15 {
				u, t := uid(), uid()
				if t == u {
					t = other(u)
				}
				typ := "follow"
				if r.IntN(3) == 0 {
					typ = "unfollow"
					for k := range follows { // mostly an existing follow, with posts to take back
						if k[1] != 1 && r.IntN(4) != 0 {
							u, t = pipeline.ID(k[0]), pipeline.ID(k[1])
							break
						}
					}
				}
				evs = append(evs, pipeline.Event{Type: typ, UID: u, Target: t})
			}
		case 1:
			for range 6 {
				author := uid()
				if r.IntN(3) == 0 {
					author = 1
				}
				evs = append(evs, pipeline.Event{Type: "post", UID: author, Post: pipeline.ID(1<<40 + step*100 + len(evs))})
			}
		case 2:
			for range 20 {
				u, o := uid(), uid()
				post := pipeline.ID(1<<40 + r.IntN(30))
				switch r.IntN(4) {
				case 0:
					evs = append(evs, pipeline.Event{Type: "like", UID: u, Post: post, Owner: o})
				case 1:
					evs = append(evs, pipeline.Event{Type: "comment", UID: u, Post: post, Owner: o, Comment: pipeline.ID(step*100 + len(evs))})
				case 2:
					evs = append(evs, pipeline.Event{Type: "mention", UID: u, Target: o})
				default:
					evs = append(evs, pipeline.Event{Type: "dm", UID: u, Target: o})
				}
			}
		case 3:
			for range 8 {
				kinds := pipeline.UnreadKinds()
				r.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
				evs = append(evs, pipeline.Event{Type: "read", UID: uid(), Kinds: kinds[:r.IntN(len(kinds))]})
			}
		default:
			evs = append(evs, pipeline.Event{Type: "system", ID: pipeline.ID(1 + step)})
		}
		run(step, evs)
	}

	// A celebrity's post costs one delta (their own post count), however many followers;
	// a post of an author with k followers costs 1 + k.
	cost := func(author pipeline.ID) int64 {
		deltas := func() int64 { return n.EventStats.Deltas.Load() + second.EventStats.Deltas.Load() }
		before := deltas()
		run(steps+int(author), []pipeline.Event{{Type: "post", UID: author, Post: pipeline.ID(1<<41 + author)}})
		return deltas() - before
	}
	if d := cost(1); d != 1 {
		t.Fatalf("a celebrity post with %d+ followers cost %d deltas, want 1", 3*limit-1, d)
	}
	followers := len(rig.StoredModel(t, c).Followers(7))
	if followers <= limit {
		if d := cost(7); d != int64(1+followers) {
			t.Fatalf("a post of an author with %d followers cost %d deltas, want %d", followers, d, 1+followers)
		}
	}
	pulled := n.EventStats.Pulled.Load() + second.EventStats.Pulled.Load()
	if pushed := n.EventStats.Pushed.Load() + second.EventStats.Pushed.Load(); pulled == 0 || pushed == 0 {
		t.Fatalf("pulled %d, pushed %d: both paths must have run", pulled, pushed)
	}
}

func unreadMany(t *testing.T, c *client.Client, uids []uint64) []pipeline.Unread {
	t.Helper()
	got, err := c.UnreadMany(context.Background(), uids...)
	if err != nil {
		t.Fatal(err)
	}
	return got
}
