package event

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/buildinfo"
	"github.com/tally-dev/tally/stages/reference"
	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/graph"
	"github.com/tally-dev/tally/store/unread"
)

// sim is a whole events stream and its partitions without NATS: one stream of messages
// (a producer's event, or a hop batch one partition hands another once it has applied
// what the batch carries), each partition applying its own messages in order, in one
// Badger transaction each, at moments a test chooses.
type sim struct {
	t        *testing.T
	stages   []*Stage
	stream   []simMsg
	next     []int // per partition: index in stream of the next message to look at
	counters map[simKey]int64
}

type simKey struct {
	family string
	id     uint64
	field  uint8
}

type simMsg struct {
	to  int
	hop bool
	evs []pipeline.Event
}

// newSim makes parts stages, each with a database of its own: a stage that read or wrote
// another partition's state would find it missing.
func newSim(t *testing.T, parts, fanout int) *sim {
	fams := pipeline.Families(pipeline.DefaultFamilies())
	f, err := resolveFields(fams)
	if err != nil {
		t.Fatal(err)
	}
	s := &sim{t: t, next: make([]int, parts), counters: map[simKey]int64{}}
	for p := range parts {
		db, err := cold.Open(cold.Options{Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		cfg := Config{Partition: p, Partitions: parts, Families: fams, FanoutLimit: fanout}
		pulled, err := unread.LoadPulled(db, p)
		if err != nil {
			t.Fatal(err)
		}
		// A resident state small enough to forget users on the way, as a stage keeps it.
		res := graph.NewResident[unread.ReaderState](4 << 10)
		s.stages = append(s.stages, &Stage{cfg: cfg, db: db, log: slog.New(slog.DiscardHandler), stats: NewStats(), fields: f, pulled: pulled, res: res})
	}
	return s
}

// publish stores a producer's event in partition p's part of the stream.
func (s *sim) publish(p int, e pipeline.Event) {
	s.stream = append(s.stream, simMsg{to: p, evs: []pipeline.Event{e}})
}

// simSeeds runs fn for seeds workloads (short of them with -short), each with its own
// random source, a fresh simulation of parts partitions and the partition it holds
// back, which applies its messages a tenth as often as the others (see interleave).
func simSeeds(t *testing.T, parts int, seeds, short, salt uint64, fn func(seed uint64, r *rand.Rand, s *sim, held int)) {
	switch {
	case testing.Short():
		seeds = short
	case buildinfo.Race: // the race detector's slowdown; every seed runs without it
		seeds = max(short, seeds/2)
	}
	for seed := range seeds {
		fn(seed, rand.New(rand.NewPCG(seed, salt)), newSim(t, parts, 3), int(seed%uint64(parts)))
	}
}

// interleave publishes e where its key lands, or a third of the time in another
// partition's batch, then makes up to two partitions apply their next message, held a
// tenth as often as the others.
func (s *sim) interleave(r *rand.Rand, held int, e pipeline.Event) {
	parts := len(s.stages)
	to := pipeline.PartitionOf(e.Key(), parts)
	if r.IntN(3) == 0 {
		to = r.IntN(parts) // in another partition's batch
	}
	s.publish(to, e)
	for range r.IntN(3) {
		if q := r.IntN(parts); q != held || r.IntN(10) == 0 {
			s.step(q)
		}
	}
}

// step makes partition p apply its next message; false when it has none.
func (s *sim) step(p int) bool {
	for ; s.next[p] < len(s.stream) && s.stream[s.next[p]].to != p; s.next[p]++ {
	}
	if s.next[p] == len(s.stream) {
		return false
	}
	seq := uint64(s.next[p] + 1)
	m := s.stream[s.next[p]]
	s.next[p]++
	st := s.stages[p]
	c := newCoalescer(len(s.stages))
	var w *work
	err := st.db.Update(func(txn *cold.Txn) error {
		w = st.newWork(txn, c, nil)
		defer w.close()
		w.hop = m.hop
		for i := range m.evs {
			e := m.evs[i]
			if !m.hop {
				e.Seq = pipeline.SeqOf(seq, i)
			}
			if err := st.applyEvent(txn, &e, m.hop, w); err != nil {
				return err
			}
		}
		return w.flush(txn, seq)
	})
	if err != nil {
		s.t.Fatal(err)
	}
	st.res.Keep(w.readers.Seen(), w.likes)
	for _, d := range c.order {
		for _, x := range c.byDest[d].deltas {
			k := simKey{d.family, x.ID, x.Field}
			if x.Op == pipeline.OpSet {
				s.counters[k] = x.N
			} else {
				s.counters[k] = max(s.counters[k]+x.N, 0)
			}
		}
	}
	for _, q := range w.fwdOrder { // published after the commit: later in the stream
		o := &w.fwd[q]
		b, err := pipeline.DecodeHopBatch(append(pipeline.AppendHopBatchHead(nil, uint32(p), 1, len(o.ends)), o.enc...), st.cfg.Families)
		if err != nil {
			s.t.Fatal(err)
		}
		s.stream = append(s.stream, simMsg{to: q, hop: true, evs: b.Events})
	}
	return true
}

// drain applies everything left, partitions in turn.
func (s *sim) drain() {
	for more := true; more; {
		more = false
		for p := range s.stages {
			for s.step(p) {
				more = true
			}
		}
	}
}

// unread is what tally.unread answers: the counters, notices and pulled posts.
func (s *sim) unread(u uint64) pipeline.Unread {
	f := s.stages[0].fields
	get := func(r fieldRef) uint64 { return uint64(s.counters[simKey{r.family, u, r.field}]) }
	w := pipeline.Unread{Comment: get(f.unComment), Mention: get(f.unMention), Like: get(f.unLike), DM: get(f.unDM), Feed: get(f.unFeed)}
	p := pipeline.PartitionOf(pipeline.ID(u), len(s.stages))
	err := s.stages[p].db.View(func(txn *cold.Txn) error {
		rs, err := unread.GetReader(txn, p, u)
		if err != nil {
			return err
		}
		w.System = unread.CountNotices(txn, p, rs.System)
		graph.Objects(txn, p, graph.Follow, u, func(author uint64, _ int64) bool {
			followed, _, _ := unread.GetFollowed(txn, p, author, u)
			w.Feed += unread.CountPulled(txn, p, author, max(rs.Feed, followed), 1<<20)
			return true
		})
		return nil
	})
	if err != nil {
		s.t.Fatal(err)
	}
	return w
}

// model is the reference model of the sim's stream: every producer event at its place.
func (s *sim) model() *reference.Model {
	m := reference.New()
	for pos, msg := range s.stream {
		if msg.hop {
			continue
		}
		for i, e := range msg.evs {
			e.Seq = pipeline.SeqOf(uint64(pos+1), i)
			if err := m.Apply(e); err != nil {
				s.t.Fatal(err)
			}
		}
	}
	return m
}

// count is a counter as the sim's counter partitions hold it.
func (s *sim) count(family string, id uint64, field string) uint64 {
	f, _ := pipeline.Families(pipeline.DefaultFamilies()).Lookup(family)
	i, _ := f.Field(field)
	return uint64(s.counters[simKey{family, id, uint8(i)}])
}

// check compares the sim with the reference model of its stream: unread of every user,
// the post and user counters, every like, and the followers and likes of every user.
func (s *sim) check(m *reference.Model, users int, posts []uint64, what string) {
	s.t.Helper()
	parts := len(s.stages)
	at := func(id uint64) *Stage { return s.stages[pipeline.PartitionOf(pipeline.ID(id), parts)] }
	for fam, fields := range map[string][]string{"post": {"like", "repost", "comment", "view"}, "user": {"follower", "following", "post"}} {
		ids := posts
		if fam == "user" {
			ids = nil
			for u := 1; u <= users; u++ {
				ids = append(ids, uint64(u))
			}
		}
		for _, id := range ids {
			want := m.Counts(fam, id)
			for i, f := range fields {
				if got := s.count(fam, id, f); got != want[i] {
					s.t.Fatalf("%s: %s %d %s = %d, stream order %d", what, fam, id, f, got, want[i])
				}
			}
		}
	}
	for id := uint64(1); id <= uint64(users); id++ {
		if got, want := s.unread(id), m.Unread(id); got != want {
			s.t.Fatalf("%s: unread of %d = %+v, stream order %+v", what, id, got, want)
		}
		st := at(id)
		liked, err := graph.Related(st.db, st.cfg.Partition, graph.Like, id, posts)
		if err != nil {
			s.t.Fatal(err)
		}
		for i, p := range posts {
			if liked[i] != m.Liked(id, p) {
				s.t.Fatalf("%s: liked(%d, %d) = %v, stream order %v", what, id, p, liked[i], !liked[i])
			}
		}
		for _, l := range []struct {
			k         graph.Kind
			bySubject bool
			want      []reference.Item
		}{{graph.Like, true, m.Likes(id)}, {graph.Follow, false, m.Followers(id)}, {graph.Follow, true, m.Following(id)}} {
			items, _, err := graph.List(st.db, st.cfg.Partition, l.k, l.bySubject, id, 1000, "")
			if err != nil {
				s.t.Fatal(err)
			}
			got := make([]reference.Item, len(items))
			for i, it := range items {
				got[i] = reference.Item{ID: it.ID, TS: it.TS}
			}
			if !slices.Equal(got, l.want) && (len(got) > 0 || len(l.want) > 0) {
				s.t.Fatalf("%s: list %c (by subject %v) of %d = %v, stream order %v", what, l.k, l.bySubject, id, got, l.want)
			}
		}
	}
}

// TestLikeBeforeReadAppliedAfter: a like stored before its owner's read, in another
// partition that applies it only after the read, is covered by the read; one stored
// after it is not.
func TestLikeBeforeReadAppliedAfter(t *testing.T) {
	s := newSim(t, 2, 10)
	owner, liker := simUser(0, 2, 1), simUser(1, 2, 1)
	s.publish(1, pipeline.Event{Type: "like", UID: liker, Post: 100, Owner: owner})
	s.publish(0, pipeline.Event{Type: "read", UID: owner, Kinds: []string{"like"}})
	s.step(0) // the read
	s.step(1) // the like: a notify to partition 0
	s.publish(1, pipeline.Event{Type: "like", UID: liker, Post: 101, Owner: owner})
	s.drain()
	if got := s.unread(uint64(owner)).Like; got != 1 {
		t.Fatalf("like unread %d, want 1 (the like after the read)", got)
	}
}

// TestReadHandedOverLate: a read in another partition's batch, stored before a like,
// reaches the reader's partition after the like: the like stays unread.
func TestReadHandedOverLate(t *testing.T) {
	s := newSim(t, 2, 10)
	owner, liker := simUser(0, 2, 1), simUser(0, 2, int(simUser(0, 2, 1))+1)
	s.publish(1, pipeline.Event{Type: "read", UID: owner, Kinds: []string{"like", "mention"}}) // lands in 1: handed to 0
	s.publish(0, pipeline.Event{Type: "like", UID: liker, Post: 100, Owner: owner})
	s.publish(0, pipeline.Event{Type: "mention", UID: liker, Target: owner})
	s.step(0)
	s.step(0)
	s.drain()
	if got := s.unread(uint64(owner)); got.Like != 1 || got.Mention != 1 {
		t.Fatalf("unread %+v, want the like and the mention after the read", got)
	}
}

// TestFeedSameInstantByPlace: follow, post, read and unfollow with one timestamp, across
// partitions and in any order of application, count by place.
func TestFeedSameInstantByPlace(t *testing.T) {
	s := newSim(t, 2, 10)
	reader, author := simUser(0, 2, 1), simUser(1, 2, 1)
	s.publish(1, pipeline.Event{Type: "post", UID: author, Post: 1, TS: 5}) // before the follow
	s.publish(0, pipeline.Event{Type: "follow", UID: reader, Target: author, TS: 5})
	s.publish(1, pipeline.Event{Type: "post", UID: author, Post: 2, TS: 5})
	s.publish(0, pipeline.Event{Type: "read", UID: reader, Kinds: []string{"feed"}, TS: 5})
	s.publish(1, pipeline.Event{Type: "post", UID: author, Post: 3, TS: 5})
	s.step(0) // follow
	s.step(0) // read, before posts 2 and 3 are applied anywhere
	s.drain()
	if got := s.unread(uint64(reader)).Feed; got != 1 {
		t.Fatalf("feed unread %d, want 1 (post 3)", got)
	}
	s.publish(0, pipeline.Event{Type: "unfollow", UID: reader, Target: author, TS: 5})
	s.drain()
	if got := s.unread(uint64(reader)).Feed; got != 0 {
		t.Fatalf("feed unread after the unfollow %d, want 0", got)
	}
}

func simUser(p, parts, from int) pipeline.ID {
	for id := pipeline.ID(from); ; id++ {
		if pipeline.PartitionOf(id, parts) == p {
			return id
		}
	}
}

// TestAnyInterleaving is a random workload over partitions applied in random
// interleavings, one partition held back: events land in any partition, so relations
// and reads are handed over and arrive after events placed later — likes, comments and
// follows made and undone while their hops are in flight, copies of one relation stored
// in several partitions. Every user's unread, the post and user counters, every like and
// every list equal the stream's order (the reference model), checked at quiet points.
func TestAnyInterleaving(t *testing.T) {
	const parts, users = 3, 12
	simSeeds(t, parts, 40, 10, 7, func(seed uint64, r *rand.Rand, s *sim, held int) {
		u := func() pipeline.ID { return pipeline.ID(1 + r.IntN(users)) }
		posts := []uint64{1, 2, 3, 4, 5, 6}
		post := func() pipeline.ID { return pipeline.ID(posts[r.IntN(len(posts))]) }
		next := pipeline.ID(1000)
		for round := range 4 {
			for range 150 {
				var e pipeline.Event
				a, b := u(), u()
				if a == b {
					b = a%users + 1
				}
				p := post()
				switch n := r.IntN(100); {
				case n < 16:
					e = pipeline.Event{Type: "like", UID: a, Post: p, Owner: 1 + pipeline.ID(p)%users}
				case n < 24:
					e = pipeline.Event{Type: "unlike", UID: a, Post: p}
				case n < 29:
					e = pipeline.Event{Type: "comment", UID: a, Post: p, Comment: pipeline.ID(1 + r.IntN(2)), Owner: 1 + pipeline.ID(p)%users}
				case n < 32:
					e = pipeline.Event{Type: "uncomment", UID: a, Post: p, Comment: pipeline.ID(1 + r.IntN(2))}
				case n < 38:
					e = pipeline.Event{Type: "mention", UID: a, Target: b}
				case n < 40:
					e = pipeline.Event{Type: "dm", UID: a, Target: b}
				case n < 50:
					e = pipeline.Event{Type: "follow", UID: a, Target: b}
				case n < 57:
					e = pipeline.Event{Type: "unfollow", UID: a, Target: b}
				case n < 70:
					next++
					e = pipeline.Event{Type: "post", UID: a, Post: next}
				case n < 74:
					e = pipeline.Event{Type: "system", ID: a}
				default:
					kinds := pipeline.UnreadKinds()
					r.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
					e = pipeline.Event{Type: "read", UID: a, Kinds: kinds[:1+r.IntN(len(kinds))]}
				}
				e.TS = int64(1 + r.IntN(3)) // milliseconds that tie
				s.interleave(r, held, e)
			}
			s.drain()
			s.check(s.model(), users, posts, fmt.Sprintf("seed %d round %d", seed, round))
		}
	})
}

// TestFanoutReadsOwnPartition: an author's followers, made in the followers' partitions,
// are listed in the author's partition, whose post then decides push or pull from its own
// state alone; a pulled post reaches every partition's readers.
func TestFanoutReadsOwnPartition(t *testing.T) {
	const parts = 3
	s := newSim(t, parts, 1) // more than one follower: pulled
	author := simUser(0, parts, 1)
	f1, f2 := simUser(1, parts, 1), simUser(2, parts, 1)
	s.publish(1, pipeline.Event{Type: "follow", UID: f1, Target: author})
	s.drain()
	s.publish(0, pipeline.Event{Type: "post", UID: author, Post: 1})
	s.drain()
	if got := s.stages[0].stats.Pulled.Load(); got != 0 {
		t.Fatalf("a post to one follower was pulled (%d)", got)
	}
	s.publish(2, pipeline.Event{Type: "follow", UID: f2, Target: author})
	s.drain()
	items, _, err := graph.List(s.stages[0].db, 0, graph.Follow, false, uint64(author), 10, "")
	if err != nil || len(items) != 2 {
		t.Fatalf("the author's partition lists %v followers (%v), want both", items, err)
	}
	s.publish(1, pipeline.Event{Type: "post", UID: author, Post: 2}) // in another partition's part
	s.drain()
	if got := s.stages[0].stats.Pulled.Load(); got != 1 {
		t.Fatalf("a post to two followers over the limit of one: %d pulled, want 1", got)
	}
	if got := s.unread(uint64(f2)).Feed; got != 1 {
		t.Fatalf("feed unread of the second follower %d, want the pulled post", got)
	}
	if got := s.unread(uint64(f1)).Feed; got != 2 {
		t.Fatalf("feed unread of the first follower %d, want the pushed and the pulled post", got)
	}
	s.publish(1, pipeline.Event{Type: "unfollow", UID: f1, Target: author})
	s.drain()
	if items, _, _ := graph.List(s.stages[0].db, 0, graph.Follow, false, uint64(author), 10, ""); len(items) != 1 || items[0].ID != uint64(f2) {
		t.Fatalf("after an unfollow the author's partition lists %v, want the second follower", items)
	}
}

// TestManyNotificationsAnyInterleaving is TestAnyInterleaving for two popular owners who
// seldom read: hundreds of notifications each, far more than a reader state keeps, so
// that they go in chunks (unread.Readers), with likes and comments undone and moved by
// relations arriving out of order — places taken back from chunks — and reads now and
// then that recount and drop them. Checked against the stream's order at quiet points.
func TestManyNotificationsAnyInterleaving(t *testing.T) {
	const parts, users = 3, 100
	simSeeds(t, parts, 12, 4, 11, func(seed uint64, r *rand.Rand, s *sim, held int) {
		u := func() pipeline.ID { return pipeline.ID(4 + r.IntN(users-3)) }
		posts := []uint64{1, 2, 3, 4}
		post := func() pipeline.ID { return pipeline.ID(posts[r.IntN(len(posts))]) }
		owner := func(p pipeline.ID) pipeline.ID { return 2 + p%2 } // users 2 and 3
		spilled := 0
		for round := range 4 {
			for range 500 {
				var e pipeline.Event
				a, p := u(), post()
				switch n := r.IntN(100); {
				case n < 40:
					e = pipeline.Event{Type: "like", UID: a, Post: p, Owner: owner(p)}
				case n < 60:
					e = pipeline.Event{Type: "unlike", UID: a, Post: p}
				case n < 72:
					e = pipeline.Event{Type: "comment", UID: a, Post: p, Comment: pipeline.ID(1 + r.IntN(3)), Owner: owner(p)}
				case n < 78:
					e = pipeline.Event{Type: "uncomment", UID: a, Post: p, Comment: pipeline.ID(1 + r.IntN(3))}
				case n < 90:
					e = pipeline.Event{Type: "mention", UID: a, Target: owner(p)}
				case n < 99:
					e = pipeline.Event{Type: "read", UID: a}
				default: // the owners read now and then
					kinds := pipeline.UnreadKinds()
					r.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
					e = pipeline.Event{Type: "read", UID: owner(p), Kinds: kinds[:1+r.IntN(len(kinds))]}
				}
				e.TS = int64(1 + r.IntN(3))
				s.interleave(r, held, e)
			}
			s.drain()
			m := s.model()
			for _, o := range []uint64{2, 3} {
				if un := m.Unread(o); un.Like > 32 || un.Comment > 32 || un.Mention > 32 {
					spilled++
				}
			}
			s.check(m, users, posts, fmt.Sprintf("seed %d round %d", seed, round))
		}
		if spilled == 0 {
			t.Fatalf("seed %d: no owner ever had more unread than a reader state keeps", seed)
		}
	})
}
