package systest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/buildinfo"
	"github.com/tally-dev/tally/stages/node"
	"github.com/tally-dev/tally/stages/reference"
	"github.com/tally-dev/tally/stages/systest/rig"
)

// view is a view of post p, n times; by u when byUser (half the generators' views say
// who viewed: the post's distinct viewers).
func view(u, p pipeline.ID, n int64, byUser bool) pipeline.Event {
	e := pipeline.Event{Type: "view", Post: p, N: n}
	if byUser {
		e.UID = u
	}
	return e
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
// when *left runs out), taken off *left.
func (g *gen) chunk(left *int, lo, spread int) []pipeline.Event {
	size := min(*left, lo+g.r.IntN(spread))
	*left -= size
	evs := make([]pipeline.Event, size)
	for i := range evs {
		evs[i] = g.event()
	}
	return evs
}

// event returns a random event: relations made and undone over few users and posts,
// so that they collide, and every other type.
func (g *gen) event() pipeline.Event {
	u, p := g.uid(), g.post()
	n := g.r.IntN(100)
	switch {
	case n < 35:
		return pipeline.Event{Type: "like", UID: u, Post: p, Owner: g.owner(p)}
	case n < 50:
		return pipeline.Event{Type: "unlike", UID: u, Post: p}
	case n < 62:
		return view(u, p, int64(g.r.IntN(4)), n%2 == 0)
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
	switch {
	case testing.Short():
		total = 20_000
	case buildinfo.Race:
		// 81 s of CI's 10 minutes at the full size, 52–64 s at a third (11-30, on a
		// slower machine): the race detector looks for races, which a fifth of the
		// events meet as well; without -race it runs the full size.
		total = 24_000
	}
	t.Run("defaults", func(t *testing.T) {
		n := testModel(t, total, func(*node.Config) {})
		// At least the 48: a machine loaded enough to let the node's leases lapse stops
		// and starts its partitions again, each restored from its snapshot once more.
		if st := &n.CounterStats; st.ColdReads.Load() == 0 || st.Restored.Load() < 16*3 {
			t.Fatalf("%d cold reads of aged posts; %d of 48 partitions restored from snapshots", st.ColdReads.Load(), st.Restored.Load())
		}
	})
	t.Run("evict-all", func(t *testing.T) {
		n := testModel(t, total/2, func(c *node.Config) { c.HotMaxMem, c.ColdCache, c.ColdAge = 1, 16*64, 0 })
		st := &n.CounterStats
		if st.Evicted.Load() < 20 || st.ColdReads.Load() < 1000 || st.Restored.Load() < 16*3 {
			t.Fatalf("cold tier barely used: %d groups evicted, %d cold reads; %d of 48 partitions restored from snapshots", st.Evicted.Load(), st.ColdReads.Load(), st.Restored.Load())
		}
	})
}

// testModel runs the model test with a configuration and returns the node after the
// restart, for its statistics.
func testModel(t *testing.T, total int, mod func(*node.Config)) *node.Node {
	dir := t.TempDir()
	// Posts count their viewers: half the views say who viewed.
	fams := pipeline.WithViewers(pipeline.DefaultFamilies())
	cfgMod := func(c *node.Config) { c.DataDir = dir; c.Partitions = 16; c.Families = fams; mod(c) }
	n, c := rig.StartNode(t, cfgMod)
	ctx := context.Background()
	g := &gen{r: rand.New(rand.NewPCG(7, 11)), users: 3000, posts: 2000}
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
			case mode == 0: // a raw batch under one key: relation events are forwarded
				evs := make([]pipeline.Event, size)
				for i := range evs {
					evs[i] = g.event()
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
					evs[i] = g.event()
					evs[i].Tx = fmt.Sprintf("%s.%d", tx, i)
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
					evs[i] = g.event()
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
	rig.WaitCaughtUp(t, c)
	// Reads of a third of the users, while nothing else is in flight, so that unread
	// counts are both set and reset.
	var reads []pipeline.Event
	for u := 1; u <= g.users; u += 3 {
		reads = append(reads, pipeline.Event{Type: "read", UID: pipeline.ID(u)})
	}
	// One invalid event for sure: a short run's workload may make none, and the check of
	// the dead letters at the end needs one.
	reads = append(reads, pipeline.Event{Type: "unfollow", UID: 1, Target: 1})
	if err := c.PublishBatch(ctx, "reads", reads); err != nil {
		t.Fatal(err)
	}
	rig.WaitCaughtUp(t, c)
	compare(t, c, g)

	// A clean restart: checkpoints are loaded, nothing is counted twice.
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	n2, c2 := rig.StartNode(t, cfgMod)
	nc2, _ := nats.Connect(n2.ClientURL())
	defer nc2.Close()
	publish(c2, nc2, total-total/2, "two")
	rig.WaitCaughtUp(t, c2)
	ref := compare(t, c2, g)
	// Every invalid event (here: users unfollowing themselves) is dead-lettered alone,
	// and nothing else is.
	js, _ := jetstream.New(nc2)
	st, err := js.Stream(ctx, c2.Subjects().DLQStream())
	if err != nil {
		t.Fatal(err)
	}
	if got := st.CachedInfo().State.Msgs; got != uint64(ref.Invalid) || ref.Invalid == 0 {
		t.Fatalf("%d dead letters, want %d (the invalid events generated)", got, ref.Invalid)
	}
	return n2
}

// compare checks every count, unread count and relation of g's users and posts against
// the reference model of the stored stream (liked and lists for a sample), and returns
// the model. The model counts posts' viewers when Tally's post family has them.
func compare(t testing.TB, c *client.Client, g *gen) *reference.Model {
	t.Helper()
	fams := pipeline.Families(pipeline.DefaultFamilies())
	rig.RetryUnavailable(t, "the post family's fields", func() error {
		r, err := c.Get(context.Background(), pipeline.FamilyPost, 1)
		if err == nil && slices.Contains(r.Fields, pipeline.FieldViewers) {
			fams = pipeline.WithViewers(fams)
		}
		return err
	})
	ref := rig.StoredModel(t, c, fams...)
	var posts, users []uint64
	for p := range g.posts {
		posts = append(posts, uint64(1<<41+p))
	}
	for u := 1; u <= g.users; u++ {
		users = append(users, uint64(u))
	}
	rig.CheckReference(t, c, ref, users, posts, 1+len(users)/100)
	compareWindows(t, c, posts, users)
	return ref
}
