package systest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/buildinfo"
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
	switch {
	case testing.Short():
		steps = 20
	case buildinfo.Race:
		steps = 40
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

// TestPopularOwnersUnread: three owners whose posts thousands like, unlike and comment
// on, in batches split by partition and in batches that are not (so that likes are
// handed over and relations move): far more notifications than a reader state keeps,
// in chunks and places taken back (store/unread). Their reads are stored behind a
// backlog in another partition, so that each reaches the owner's partition after
// notifications placed after it and recounts what the chunks hold. Every count, unread
// count and list equals the stored stream's order.
func TestPopularOwnersUnread(t *testing.T) {
	const parts, users, owners, slow = 4, 3000, 3, 1
	rounds := 12
	if testing.Short() {
		rounds = 4
	}
	_, c := rig.StartNode(t, func(c *node.Config) { c.Partitions = parts })
	ctx := context.Background()
	js, err := jetstream.New(c.Conn())
	if err != nil {
		t.Fatal(err)
	}
	in := func(p int, from uint64) uint64 { return idIn(parts, p, from) }
	var owner [owners]pipeline.ID // in partition 0
	for i := range owner {
		owner[i] = pipeline.ID(in(0, uint64(10+i*10)))
	}
	var likers []pipeline.ID // none in the slow partition
	for u := uint64(100); len(likers) < users; u++ {
		if pipeline.PartitionOf(pipeline.ID(u), parts) != slow {
			likers = append(likers, pipeline.ID(u))
		}
	}
	posts := []uint64{1 << 40, 1<<40 + 1, 1<<40 + 2, 1<<40 + 3, 1<<40 + 4, 1<<40 + 5}
	ownerOf := func(p uint64) pipeline.ID { return owner[p%owners] }
	tx := 0
	unsplit := func(key pipeline.ID, evs []pipeline.Event) {
		t.Helper()
		tx++
		publishUnsplit(t, js, c.Subjects(), key, fmt.Sprint("pop.", tx), evs)
	}
	slowKey := pipeline.ID(in(slow, 1<<41))
	r := rand.New(rand.NewPCG(3, 5))
	for round := range rounds {
		views := make([]pipeline.Event, 20_000) // the slow partition's backlog
		for i := range views {
			views[i] = pipeline.Event{Type: "view", Post: slowKey, N: 1}
		}
		unsplit(slowKey, views)
		for o := range owner { // behind it, each owner's read of one kind
			unsplit(slowKey, []pipeline.Event{{Type: "read", UID: owner[o], Kinds: []string{[]string{"like", "comment", "mention"}[(round+o)%3]}}})
		}
		var batch []pipeline.Event
		for i := range 2_000 { // placed after the reads, applied before them
			p := posts[r.IntN(len(posts))]
			uid := likers[r.IntN(len(likers))]
			var e pipeline.Event
			switch k := r.IntN(100); {
			case k < 55:
				e = pipeline.Event{Type: "like", UID: uid, Post: pipeline.ID(p), Owner: ownerOf(p)}
			case k < 75:
				e = pipeline.Event{Type: "unlike", UID: uid, Post: pipeline.ID(p)}
			case k < 88:
				e = pipeline.Event{Type: "comment", UID: uid, Post: pipeline.ID(p), Comment: pipeline.ID(1 + r.IntN(2)), Owner: ownerOf(p)}
			case k < 93:
				e = pipeline.Event{Type: "uncomment", UID: uid, Post: pipeline.ID(p), Comment: pipeline.ID(1 + r.IntN(2))}
			default:
				e = pipeline.Event{Type: "mention", UID: uid, Target: ownerOf(p)}
			}
			e.Tx = fmt.Sprint("pop.", round, ".", i)
			if batch = append(batch, e); len(batch) == 250 {
				if i/250%2 == 0 {
					if err := c.PublishBatch(ctx, fmt.Sprint("pop.b.", round, ".", i), batch); err != nil {
						t.Fatal(err)
					}
				} else {
					unsplit(batch[0].Key(), batch)
				}
				batch = batch[:0]
			}
		}
	}
	rig.WaitCaughtUp(t, c)
	ref := rig.StoredModel(t, c)
	for _, o := range owner {
		if u := ref.Unread(uint64(o)); u.Like+u.Comment+u.Mention <= 3*32 {
			t.Fatalf("owner %d: %+v unread, not more than reader states keep: the test misses the chunks", o, u)
		}
	}
	ids := make([]uint64, 0, owners+users)
	for _, o := range owner {
		ids = append(ids, uint64(o))
	}
	for _, u := range likers[:300] {
		ids = append(ids, uint64(u))
	}
	rig.CheckReference(t, c, ref, ids, posts, 31)
}
