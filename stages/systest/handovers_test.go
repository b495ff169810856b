package systest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/stages/node"
	"github.com/tally-dev/tally/stages/systest/rig"
)

// TestHandOversExact hands every partition over again and again as rolling restarts
// do — each of three tallyd in this process closed in turn and started again on its
// data directory, its partitions moving to other processes and back — under a stream of
// events that moves unread counts (notifications, posts pushed to followers, reads,
// system notices) and with the availability tests' settings (a hot tier of 16 KiB, so
// counters are evicted and read back from Badger; snapshots every 200 journaled ids).
// Every count, unread count and relation must equal the reference model of the stored
// stream at the end.
//
// "following": backups every 300 ms, each partition moving to a warm standby.
// "falling behind": backups every 50 ms and standbys that look at them once a second,
// so that they fall behind the owners' purges and start again and again, and partitions
// move once out of patience. A broken standby started again at once ran beside its
// stopping workers, which wrote their last checkpoint and snapshot over its state:
// before that was fixed 3 runs in 5 of these rolling restarts ended with one or two
// users or posts of one partition counted one off.
func TestHandOversExact(t *testing.T) {
	skipUnderRace(t)
	rounds := 6
	if testing.Short() {
		rounds = 3
	}
	t.Run("following", func(t *testing.T) {
		testHandOvers(t, rounds, false, func(cfg *node.Config) { cfg.BackupEvery = 300 * time.Millisecond })
	})
	t.Run("falling behind", func(t *testing.T) {
		testHandOvers(t, rounds, true, func(cfg *node.Config) {
			cfg.BackupEvery, cfg.StandbyCheck, cfg.MovePatience = 50*time.Millisecond, time.Second, 3*time.Second
		})
	})
}

func testHandOvers(t *testing.T, rounds int, behind bool, mod func(*node.Config)) {
	const partitions = 8
	url, c := rig.NATSServer(t)
	h := &handOvers{t: t, url: url, mod: mod, behind: behind, nodes: make([]*node.Node, 3)}
	t.Cleanup(h.closeAll)
	for i := range h.nodes {
		h.dirs = append(h.dirs, t.TempDir())
		h.start(i)
	}
	g := &unreadGen{r: rand.New(rand.NewPCG(24, 25)), users: 120}
	stop, done := make(chan struct{}), make(chan struct{})
	halt := sync.OnceFunc(func() {
		close(stop)
		<-done
	})
	t.Cleanup(halt)
	go func() { // a chunk every 20 ms, each until it is stored, under the same tx
		defer close(done)
		for chunk := 0; ; chunk++ {
			evs, tx := g.chunk(60), "ho."+strconv.Itoa(chunk)
			for stored := false; !stored; {
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
				stored = c.PublishBatch(context.Background(), tx, evs) == nil
			}
		}
	}()
	h.waitSpread(partitions)
	for round := range rounds {
		i := round % len(h.nodes)
		h.close(i, round)
		h.start(i)
		h.waitSpread(partitions)
	}
	halt()
	rig.WaitCaughtUp(t, c)
	restored, warm, restarts := h.moved.restored, h.moved.warm, h.moved.restarts
	for _, n := range h.nodes {
		restored, warm, restarts = restored+n.PartsRestored.Load(), warm+n.PartsWarm.Load(), restarts+n.StandbyRestarts.Load()
	}
	t.Logf("%d rounds: partitions taken over warm %d, restored %d; standbys started again %d times", rounds, warm, restored, restarts)
	if h.behind && restarts == 0 {
		t.Fatal("no standby fell behind a backup: the test did not test that")
	}
	users := make([]uint64, g.users)
	for i := range users {
		users[i] = uint64(i + 1)
	}
	rig.CheckReference(t, c, rig.StoredModel(t, c), users, g.postIDs(), 10)
}

// handOvers runs three tallyd in this process on one NATS server, each started again
// on its own data directory after it is closed.
type handOvers struct {
	t      *testing.T
	url    string
	mod    func(*node.Config)
	behind bool // standbys fall behind the backups: never warm for long
	dirs   []string
	mu     sync.Mutex
	nodes  []*node.Node
	// moved counts what the tallyd closed did: partitions taken over warm and restored,
	// standbys started again.
	moved struct{ warm, restored, restarts int64 }
}

func (h *handOvers) start(i int) {
	h.t.Helper()
	cfg := node.DefaultConfig()
	cfg.DataDir, cfg.NATSURL, cfg.Join = h.dirs[i], h.url, true
	cfg.Partitions, cfg.FlushInterval = 8, 20*time.Millisecond
	cfg.LeaseTTL, cfg.HotMaxMem, cfg.SnapshotMin = failoverTTL, 16<<10, 200
	h.mod(&cfg)
	n, err := node.Start(context.Background(), cfg, rig.Logger())
	if err != nil {
		h.t.Fatalf("start tallyd %d: %v", i, err)
	}
	h.mu.Lock()
	h.nodes[i] = n
	h.mu.Unlock()
}

// close closes tallyd i as SIGTERM does: it hands its partitions over first.
func (h *handOvers) close(i, round int) {
	h.t.Helper()
	h.mu.Lock()
	n := h.nodes[i]
	h.nodes[i] = nil
	h.mu.Unlock()
	if err := n.Close(); err != nil {
		h.t.Fatalf("round %d: close tallyd %d: %v", round, i, err)
	}
	h.moved.restored += n.PartsRestored.Load()
	h.moved.warm += n.PartsWarm.Load()
	h.moved.restarts += n.StandbyRestarts.Load()
}

func (h *handOvers) closeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, n := range h.nodes {
		if n != nil {
			n.Close()
		}
	}
}

// waitSpread waits until every partition is owned, each tallyd owning its share, and
// each has a warm standby — unless standbys fall behind, never warm for long.
func (h *handOvers) waitSpread(partitions int) {
	h.t.Helper()
	rig.Eventually(h.t, "the partitions spread", func() (bool, string) {
		owned, warm := 0, 0
		var each []int
		for _, n := range h.nodes {
			k := len(n.Parts())
			owned, warm, each = owned+k, warm+len(n.Standbys()), append(each, k)
			if k < partitions/len(h.nodes) {
				return false, fmt.Sprint("owned ", each)
			}
		}
		return owned == partitions && (h.behind || warm == partitions), fmt.Sprint("owned ", each, ", warm standbys ", warm)
	})
}

// unreadGen makes events that move unread counts over few users: notifications
// (likes, comments, mentions, DMs, taken back by unlikes), posts pushed to followers,
// follows and unfollows, reads of some kinds and system notices.
type unreadGen struct {
	r       *rand.Rand
	users   int
	posts   int
	comment int
	notices int
}

func (g *unreadGen) uid() pipeline.ID { return pipeline.ID(1 + g.r.IntN(g.users)) }

func (g *unreadGen) post() pipeline.ID {
	if g.posts == 0 || g.r.IntN(8) == 0 {
		g.posts++
	}
	return pipeline.ID(1<<41 + g.r.IntN(g.posts))
}

func (g *unreadGen) postIDs() []uint64 {
	ids := make([]uint64, g.posts)
	for i := range ids {
		ids[i] = uint64(1<<41 + i)
	}
	return ids
}

// owner is a post's author, fixed by its id.
func (g *unreadGen) owner(p pipeline.ID) pipeline.ID { return pipeline.ID(1 + int(p)%g.users) }

func (g *unreadGen) chunk(n int) []pipeline.Event {
	evs := make([]pipeline.Event, n)
	for i := range evs {
		evs[i] = g.event()
	}
	return evs
}

func (g *unreadGen) event() pipeline.Event {
	u := g.uid()
	switch n := g.r.IntN(100); {
	case n < 25:
		p := g.post()
		return pipeline.Event{Type: "like", UID: u, Post: p, Owner: g.owner(p)}
	case n < 33:
		return pipeline.Event{Type: "unlike", UID: u, Post: g.post()}
	case n < 43:
		p := g.post()
		g.comment++
		return pipeline.Event{Type: "comment", UID: u, Post: p, Owner: g.owner(p), Comment: pipeline.ID(g.comment)}
	case n < 53:
		return pipeline.Event{Type: "mention", UID: u, Target: g.uid()}
	case n < 58:
		return pipeline.Event{Type: "dm", UID: u, Target: g.uid()}
	case n < 70:
		t := g.uid()
		if t == u {
			t = u%pipeline.ID(g.users) + 1
		}
		return pipeline.Event{Type: "follow", UID: u, Target: t}
	case n < 75:
		return pipeline.Event{Type: "unfollow", UID: u, Target: g.uid()}
	case n < 85:
		p := g.post()
		return pipeline.Event{Type: "post", UID: g.owner(p), Post: p}
	case n < 99:
		kinds := pipeline.UnreadKinds()
		g.r.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
		return pipeline.Event{Type: "read", UID: u, Kinds: kinds[:g.r.IntN(len(kinds))]}
	default:
		g.notices++
		return pipeline.Event{Type: "system", ID: pipeline.ID(g.notices)}
	}
}
