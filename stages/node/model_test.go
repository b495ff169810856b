package node_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/stages/node"
)

// model is the reference: a plain in-memory counter fed the same events in publish order.
type model struct {
	likes    map[[2]uint64]bool
	comments map[[3]uint64]bool
	follows  map[[2]uint64]bool
	post     map[uint64]*[4]uint64 // like, repost, comment, view
	user     map[uint64]*[3]uint64 // follower, following, post
	unread   map[uint64]*[4]uint64 // comment, mention, like, dm
	invalid  int                   // events Tally must dead-letter
}

func newModel() *model {
	return &model{likes: map[[2]uint64]bool{}, comments: map[[3]uint64]bool{}, follows: map[[2]uint64]bool{},
		post: map[uint64]*[4]uint64{}, user: map[uint64]*[3]uint64{}, unread: map[uint64]*[4]uint64{}}
}

func row[T any](m map[uint64]*T, id uint64) *T {
	if m[id] == nil {
		m[id] = new(T)
	}
	return m[id]
}

func dec(v *uint64) {
	if *v > 0 {
		*v--
	}
}

func (m *model) apply(e pipeline.Event) {
	uid, post := uint64(e.UID), uint64(e.Post)
	notify := func(f int) {
		if e.Owner != 0 && e.Owner != e.UID {
			row(m.unread, uint64(e.Owner))[f]++
		}
	}
	switch e.Type {
	case "like":
		if !m.likes[[2]uint64{uid, post}] {
			m.likes[[2]uint64{uid, post}] = true
			row(m.post, post)[0]++
			notify(2)
		}
	case "unlike":
		if m.likes[[2]uint64{uid, post}] {
			delete(m.likes, [2]uint64{uid, post})
			dec(&row(m.post, post)[0])
		}
	case "comment":
		k := [3]uint64{uid, post, uint64(e.Comment)}
		if !m.comments[k] {
			m.comments[k] = true
			row(m.post, post)[2]++
			notify(0)
		}
	case "uncomment":
		k := [3]uint64{uid, post, uint64(e.Comment)}
		if m.comments[k] {
			delete(m.comments, k)
			dec(&row(m.post, post)[2])
		}
	case "follow", "unfollow":
		if e.UID == e.Target {
			m.invalid++
			return
		}
		k := [2]uint64{uid, uint64(e.Target)}
		if m.follows[k] == (e.Type == "follow") {
			return
		}
		if e.Type == "follow" {
			m.follows[k] = true
			row(m.user, uid)[1]++
			row(m.user, uint64(e.Target))[0]++
		} else {
			delete(m.follows, k)
			dec(&row(m.user, uid)[1])
			dec(&row(m.user, uint64(e.Target))[0])
		}
	case "repost":
		row(m.post, post)[1]++
		row(m.user, uid)[2]++
	case "post":
		row(m.user, uid)[2]++
	case "view":
		row(m.post, post)[3] += uint64(max(e.N, 1))
	case "mention":
		if e.UID != e.Target {
			row(m.unread, uint64(e.Target))[1]++
		}
	case "read":
		*row(m.unread, uid) = [4]uint64{}
	}
}

// gen makes random events over a small id space so that relations collide often.
type gen struct {
	r            *rand.Rand
	users, posts int
	comment      uint64
}

func (g *gen) uid() pipeline.ID  { return pipeline.ID(1 + g.r.IntN(g.users)) }
func (g *gen) post() pipeline.ID { return pipeline.ID(1<<41 + g.r.IntN(g.posts)) } // snowflake-sized ids
func (g *gen) owner(p pipeline.ID) pipeline.ID {
	return pipeline.ID(1 + int(uint64(p)%uint64(g.users)))
}

// chunk returns the next chunk of a random event log: lo to lo+spread events (fewer
// when *left runs out), applied to ref and taken off *left.
func (g *gen) chunk(ref *model, left *int, lo, spread int) []pipeline.Event {
	size := min(*left, lo+g.r.IntN(spread))
	*left -= size
	evs := make([]pipeline.Event, size)
	for i := range evs {
		evs[i] = g.event(false)
		ref.apply(evs[i])
	}
	return evs
}

// event returns a random event; relationsOnly limits it to order-insensitive types
// (likes, follows, views) for batches that are routed through another partition.
func (g *gen) event(relationsOnly bool) pipeline.Event {
	u, p := g.uid(), g.post()
	n := g.r.IntN(100)
	if relationsOnly {
		// Forwarded events arrive after later direct ones of the same user, so these users
		// only ever like and follow: set-like, so the order does not matter.
		u = pipeline.ID(g.users + 1 + g.r.IntN(500))
		switch {
		case n < 50:
			return pipeline.Event{Type: "like", UID: u, Post: p, Owner: g.owner(p)}
		case n < 80:
			return pipeline.Event{Type: "view", Post: p, N: int64(1 + g.r.IntN(3))}
		default:
			t := g.uid()
			if t == u {
				t = u%pipeline.ID(g.users) + 1
			}
			return pipeline.Event{Type: "follow", UID: u, Target: t}
		}
	}
	switch {
	case n < 35:
		return pipeline.Event{Type: "like", UID: u, Post: p, Owner: g.owner(p)}
	case n < 50:
		return pipeline.Event{Type: "unlike", UID: u, Post: p}
	case n < 62:
		return pipeline.Event{Type: "view", Post: p, N: int64(g.r.IntN(4))}
	case n < 67:
		return pipeline.Event{Type: "repost", UID: u, Post: p}
	case n < 74:
		g.comment++
		return pipeline.Event{Type: "comment", UID: u, Post: p, Comment: pipeline.ID(g.comment%50 + 1), Owner: g.owner(p)}
	case n < 78:
		return pipeline.Event{Type: "uncomment", UID: u, Post: p, Comment: pipeline.ID(g.r.IntN(50) + 1)}
	case n < 86:
		t := g.uid()
		if t == u {
			t = u%pipeline.ID(g.users) + 1
		}
		return pipeline.Event{Type: "follow", UID: u, Target: t}
	case n < 92:
		return pipeline.Event{Type: "unfollow", UID: u, Target: g.uid()}
	case n < 96:
		return pipeline.Event{Type: "mention", UID: u, Target: g.uid()}
	default:
		return pipeline.Event{Type: "post", UID: u, Post: p}
	}
}

// TestModel publishes random events through the whole pipeline, with re-sent
// duplicates, likes twice, unlikes of nothing, batches sent to the wrong partition and a
// restart, and compares every count and relation with the reference. It runs with the
// defaults — post ids are from 2010, past the cold age, so posts are served from the
// cold tier once aged out — and with a hot-tier budget of one byte and a tiny cold
// cache, so that every group of ids is evicted at every flush and read back from Badger.
func TestModel(t *testing.T) {
	total := 120_000
	if testing.Short() {
		total = 20_000
	}
	t.Run("defaults", func(t *testing.T) {
		n := testModel(t, total, func(*node.Config) {})
		if st := &n.CounterStats; st.ColdReads.Load() == 0 || st.Restored.Load() != 16*3 {
			t.Fatalf("%d cold reads of aged posts; %d of 48 partitions restored from snapshots", st.ColdReads.Load(), st.Restored.Load())
		}
	})
	t.Run("evict-all", func(t *testing.T) {
		n := testModel(t, total/2, func(c *node.Config) { c.HotMaxMem, c.ColdCache, c.ColdAge = 1, 16*64, 0 })
		st := &n.CounterStats
		if st.Evicted.Load() < 20 || st.ColdReads.Load() < 1000 || st.Restored.Load() != 16*3 {
			t.Fatalf("cold tier barely used: %d groups evicted, %d cold reads; %d of 48 partitions restored from snapshots", st.Evicted.Load(), st.ColdReads.Load(), st.Restored.Load())
		}
	})
}

// testModel runs the model test with a configuration and returns the node after the
// restart, for its statistics.
func testModel(t *testing.T, total int, mod func(*node.Config)) *node.Node {
	dir := t.TempDir()
	cfgMod := func(c *node.Config) { c.DataDir = dir; c.Partitions = 16; mod(c) }
	n, c := startNode(t, cfgMod)
	ctx := context.Background()
	g := &gen{r: rand.New(rand.NewPCG(7, 11)), users: 3000, posts: 2000}
	ref := newModel()
	nc, _ := nats.Connect(n.ClientURL())
	defer nc.Close()

	publish := func(c *client.Client, nc *nats.Conn, count int, phase string) {
		t.Helper()
		js, _ := jetstream.New(nc)
		for chunk := 0; count > 0; chunk++ {
			size := min(count, 1+g.r.IntN(1500))
			count -= size
			tx := fmt.Sprintf("%s.%d", phase, chunk)
			switch mode := g.r.IntN(10); {
			case mode == 0: // a raw batch under one key: relation events must be forwarded
				evs := make([]pipeline.Event, size)
				for i := range evs {
					evs[i] = g.event(true)
					ref.apply(evs[i])
				}
				data, _ := pipeline.Marshal(&pipeline.Batch{Events: evs}, false)
				for range 2 { // and re-sent: the duplicate window drops it
					if _, err := js.Publish(ctx, c.Subjects().Event("batch", evs[0].Key()), data, jetstream.WithMsgID(tx)); err != nil {
						t.Fatal(err)
					}
				}
			case mode == 1: // single events, some re-sent with the same tx
				evs := make([]pipeline.Event, min(size, 200))
				count += size - len(evs)
				for i := range evs {
					evs[i] = g.event(false)
					evs[i].Tx = fmt.Sprintf("%s.%d", tx, i)
					ref.apply(evs[i])
				}
				if err := c.Publish(ctx, evs...); err != nil {
					t.Fatal(err)
				}
				if err := c.Publish(ctx, evs[:len(evs)/3]...); err != nil {
					t.Fatal(err)
				}
			default:
				evs := make([]pipeline.Event, size)
				for i := range evs {
					evs[i] = g.event(false)
					ref.apply(evs[i])
				}
				if err := c.PublishBatch(ctx, tx, evs); err != nil {
					t.Fatal(err)
				}
				if g.r.IntN(4) == 0 { // a producer retry of the whole batch
					if err := c.PublishBatch(ctx, tx, evs); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
	publish(c, nc, total/2, "one")
	waitCaughtUp(t, c)
	// Reads reset unread counts; they race with likes of other partitions, so they get a
	// phase of their own, after everything before them has been applied.
	var reads []pipeline.Event
	for u := 1; u <= g.users; u += 3 {
		e := pipeline.Event{Type: "read", UID: pipeline.ID(u)}
		reads = append(reads, e)
		ref.apply(e)
	}
	if err := c.PublishBatch(ctx, "reads", reads); err != nil {
		t.Fatal(err)
	}
	waitCaughtUp(t, c)
	compare(t, c, ref, g)

	// A clean restart: checkpoints are loaded, nothing is counted twice.
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	n2, c2 := startNode(t, cfgMod)
	nc2, _ := nats.Connect(n2.ClientURL())
	defer nc2.Close()
	publish(c2, nc2, total-total/2, "two")
	waitCaughtUp(t, c2)
	compare(t, c2, ref, g)
	// Every invalid event (here: users unfollowing themselves) is dead-lettered alone,
	// and nothing else is.
	js, _ := jetstream.New(nc2)
	st, err := js.Stream(ctx, c2.Subjects().DLQStream())
	if err != nil {
		t.Fatal(err)
	}
	if got := st.CachedInfo().State.Msgs; got != uint64(ref.invalid) || ref.invalid == 0 {
		t.Fatalf("%d dead letters, want %d (the invalid events generated)", got, ref.invalid)
	}
	return n2
}

func waitCaughtUp(t testing.TB, c *client.Client) {
	t.Helper()
	eventually(t, "every partition caught up", func() (bool, string) {
		h, err := c.Health(context.Background())
		if err != nil {
			return false, err.Error()
		}
		return h.OK, fmt.Sprint(h.Lagging)
	})
}

// retryUnavailable calls ask until it answers something else than unavailable, as a
// client must: a partition may be handed over at any time (a lease lost while NATS elects
// a leader, on a machine slowed by the race detector), and answers unavailable until its
// new owner has it.
func retryUnavailable(t *testing.T, what string, ask func() error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := ask()
		if err == nil {
			return
		}
		if !errors.Is(err, client.ErrUnavailable) || time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// compare checks every count and relation of the reference against Tally.
func compare(t *testing.T, c *client.Client, ref *model, g *gen) {
	t.Helper()
	ctx := context.Background()
	check := func(family string, ids []uint64, want func(id uint64) []uint64) {
		t.Helper()
		for len(ids) > 0 {
			k := min(len(ids), 1000)
			var r *pipeline.GetReply
			retryUnavailable(t, "get "+family, func() (err error) {
				if r, err = c.Get(ctx, family, ids[:k]...); err == nil && len(r.Unavailable) > 0 {
					err = fmt.Errorf("%w: %d ids, e.g. %d", client.ErrUnavailable, len(r.Unavailable), r.Unavailable[0])
				}
				return err
			})
			for i, id := range ids[:k] {
				// want may be a prefix: feed unread is checked by TestUnreadModel, where
				// follows and posts do not race.
				if w := want(id); !slices.Equal(r.Counts[i][:len(w)], w) {
					t.Fatalf("%s %d: tally %v, reference %v", family, id, r.Counts[i], w)
				}
			}
			ids = ids[k:]
		}
	}
	var posts, users []uint64
	for p := range g.posts {
		posts = append(posts, uint64(1<<41+p))
	}
	for u := 1; u <= g.users+500; u++ {
		users = append(users, uint64(u))
	}
	zero := func(n int) []uint64 { return make([]uint64, n) }
	check("post", posts, func(id uint64) []uint64 {
		if r := ref.post[id]; r != nil {
			return r[:]
		}
		return zero(4)
	})
	check("user", users, func(id uint64) []uint64 {
		if r := ref.user[id]; r != nil {
			return r[:]
		}
		return zero(3)
	})
	check("unread", users, func(id uint64) []uint64 {
		if r := ref.unread[id]; r != nil {
			return r[:]
		}
		return zero(4)
	})
	// Relations: every like the reference has is there (none missing), and for a sample
	// of users every post is asked (none extra).
	likedBy := map[uint64][]uint64{}
	for k := range ref.likes {
		likedBy[k[0]] = append(likedBy[k[0]], k[1])
	}
	for u, ps := range likedBy {
		var liked []bool
		retryUnavailable(t, "liked", func() (err error) { liked, err = c.Liked(ctx, u, ps...); return err })
		for i, p := range ps {
			if !liked[i] {
				t.Fatalf("liked(%d, %d) = false, reference true", u, p)
			}
		}
	}
	for i := 0; i < len(users); i += 97 {
		u := users[i]
		var liked []bool
		retryUnavailable(t, "liked", func() (err error) { liked, err = c.Liked(ctx, u, posts...); return err })
		for i, p := range posts {
			if liked[i] != ref.likes[[2]uint64{u, p}] {
				t.Fatalf("liked(%d, %d) = %v, reference %v", u, p, liked[i], !liked[i])
			}
		}
	}
	// Lists: a sample of users' likes and followers, paged, newest first.
	for _, u := range users[:100] {
		got := listAll(t, c, client.LikesOfUser, u)
		var want []uint64
		for k := range ref.likes {
			if k[0] == u {
				want = append(want, k[1])
			}
		}
		if !sameSet(got, want) {
			t.Fatalf("likes of user %d: tally %v, reference %v", u, got, want)
		}
		got = listAll(t, c, client.Followers, u)
		want = want[:0]
		for k := range ref.follows {
			if k[1] == u {
				want = append(want, k[0])
			}
		}
		if !sameSet(got, want) {
			t.Fatalf("followers of %d: tally %v, reference %v", u, got, want)
		}
	}
	// A sample of posts' likers (liker chunks, merged per second), paged, newest first,
	// each liker once.
	likers := map[uint64][]uint64{}
	for k := range ref.likes {
		likers[k[1]] = append(likers[k[1]], k[0])
	}
	for i := 0; i < len(posts); i += 5 {
		if got := listAll(t, c, client.LikesOfPost, posts[i]); !sameSet(got, likers[posts[i]]) {
			t.Fatalf("likers of post %d: tally %v, reference %v", posts[i], got, likers[posts[i]])
		}
	}
}

func listAll(t *testing.T, c *client.Client, list string, id uint64) []uint64 {
	t.Helper()
	var out []uint64
	var lastTS int64 = 1 << 62
	cursor := ""
	for {
		var p *client.Page
		retryUnavailable(t, list, func() (err error) { p, err = c.List(context.Background(), list, id, 7, cursor); return err })
		for i, ts := range p.TS {
			if ts > lastTS {
				t.Fatalf("%s of %d not newest first", list, id)
			}
			lastTS = ts
			out = append(out, p.IDs[i])
		}
		if p.Next == "" {
			return out
		}
		cursor = p.Next
	}
}

func sameSet(a, b []uint64) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
