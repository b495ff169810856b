package event

import (
	"log/slog"
	"math/rand/v2"
	"testing"

	"github.com/dgraph-io/badger/v4"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/store/cold"
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
		pulled, err := cold.LoadPulled(db, p)
		if err != nil {
			t.Fatal(err)
		}
		s.stages = append(s.stages, &Stage{cfg: cfg, db: db, log: slog.New(slog.DiscardHandler), stats: NewStats(), fields: f, pulled: pulled})
	}
	return s
}

// publish stores a producer's event in partition p's part of the stream.
func (s *sim) publish(p int, e pipeline.Event) {
	s.stream = append(s.stream, simMsg{to: p, evs: []pipeline.Event{e}})
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
	err := st.db.Badger().Update(func(txn *badger.Txn) error {
		w = st.newWork(txn, c, nil)
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
		return w.likes.Flush(txn, seq)
	})
	if err != nil {
		s.t.Fatal(err)
	}
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
		s.stream = append(s.stream, simMsg{to: q, hop: true, evs: w.fwd[q]})
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
	err := s.stages[p].db.Badger().View(func(txn *badger.Txn) error {
		rs, err := cold.GetReader(txn, p, u)
		if err != nil {
			return err
		}
		w.System = cold.CountNotices(txn, p, rs.System)
		cold.Objects(txn, p, cold.Follow, u, func(author uint64, _ int64) bool {
			followed, _, _ := cold.GetFollowed(txn, p, author, u)
			w.Feed += cold.CountPulled(txn, p, author, max(rs.Feed, followed), 1<<20)
			return true
		})
		return nil
	})
	if err != nil {
		s.t.Fatal(err)
	}
	return w
}

// simModel is unread by the stream's order: every producer event at its place.
type simModel struct {
	likes    map[[2]uint64]bool
	notif    map[uint64]*[4]uint64
	system   int
	sysSeen  map[uint64]int
	followed map[[2]uint64]int
	posted   map[uint64][]int
	feedRead map[uint64]int
}

func (s *sim) model() *simModel {
	m := &simModel{likes: map[[2]uint64]bool{}, notif: map[uint64]*[4]uint64{}, sysSeen: map[uint64]int{},
		followed: map[[2]uint64]int{}, posted: map[uint64][]int{}, feedRead: map[uint64]int{}}
	kind := map[string]int{"comment": 0, "mention": 1, "like": 2, "dm": 3}
	for pos, msg := range s.stream {
		if msg.hop {
			continue
		}
		e := msg.evs[0]
		uid, target := uint64(e.UID), uint64(e.Target)
		bump := func(who uint64, k string) {
			if m.notif[who] == nil {
				m.notif[who] = new([4]uint64)
			}
			m.notif[who][kind[k]]++
		}
		switch e.Type {
		case "like":
			if !m.likes[[2]uint64{uid, uint64(e.Post)}] && e.Owner != e.UID {
				bump(uint64(e.Owner), "like")
			}
			m.likes[[2]uint64{uid, uint64(e.Post)}] = true
		case "mention", "dm":
			bump(target, e.Type)
		case "system":
			m.system++
		case "follow":
			if _, ok := m.followed[[2]uint64{uid, target}]; !ok {
				m.followed[[2]uint64{uid, target}] = pos
			}
		case "unfollow":
			delete(m.followed, [2]uint64{uid, target})
		case "post":
			m.posted[uid] = append(m.posted[uid], pos)
		case "read":
			for _, k := range e.Kinds {
				switch k {
				case "feed":
					m.feedRead[uid] = pos
				case "system":
					m.sysSeen[uid] = m.system
				default:
					if m.notif[uid] != nil {
						m.notif[uid][kind[k]] = 0
					}
				}
			}
		}
	}
	return m
}

func (m *simModel) want(u uint64) pipeline.Unread {
	var w pipeline.Unread
	if n := m.notif[u]; n != nil {
		w.Comment, w.Mention, w.Like, w.DM = n[0], n[1], n[2], n[3]
	}
	w.System = uint64(m.system - m.sysSeen[u])
	for k, since := range m.followed {
		if k[0] == u {
			for _, p := range m.posted[k[1]] {
				if p > max(since, m.feedRead[u]) {
					w.Feed++
				}
			}
		}
	}
	return w
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

// TestUnreadAnyInterleaving is a random workload over partitions applied in random
// interleavings (events landing in any partition, so relations and reads are handed
// over): every user's unread equals the stream's order, checked at quiet points. Odd
// seeds repeat likes and follows (each stored twice or more, anywhere) and have no
// unfollows: a relation is placed by its first copy in the stream. (How a relation's
// undoing orders with a copy handed over late is the relations' order, not unread's.)
func TestUnreadAnyInterleaving(t *testing.T) {
	const parts, users = 3, 12
	for seed := range uint64(30) {
		r := rand.New(rand.NewPCG(seed, 7))
		s := newSim(t, parts, 3)
		dupes := seed%2 == 1
		u := func() pipeline.ID { return pipeline.ID(1 + r.IntN(users)) }
		post := pipeline.ID(1000)
		for round := range 4 {
			for range 150 {
				var e pipeline.Event
				a, b := u(), u()
				if a == b {
					b = a%users + 1
				}
				switch n := r.IntN(100); {
				case n < 20:
					post++ // each like a new relation, unless dupes
					e = pipeline.Event{Type: "like", UID: a, Post: post, Owner: b}
					if dupes {
						e.UID, e.Post = pipeline.ID(1+r.IntN(3)), pipeline.ID(1+r.IntN(8))
						e.Owner = 4 + e.Post%2 // a post's owner
					}
				case n < 27:
					e = pipeline.Event{Type: "mention", UID: a, Target: b}
				case n < 30:
					e = pipeline.Event{Type: "dm", UID: a, Target: b}
				case n < 45:
					e = pipeline.Event{Type: "follow", UID: a, Target: b}
				case n < 52 && !dupes:
					e = pipeline.Event{Type: "unfollow", UID: a, Target: b}
				case n < 70 || n < 52:
					post++
					e = pipeline.Event{Type: "post", UID: a, Post: post}
				case n < 74:
					e = pipeline.Event{Type: "system", ID: a}
				default:
					kinds := pipeline.UnreadKinds()
					r.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
					e = pipeline.Event{Type: "read", UID: a, Kinds: kinds[:1+r.IntN(len(kinds))]}
				}
				e.TS = 1 // one millisecond for everything
				p := pipeline.PartitionOf(e.Key(), parts)
				if r.IntN(3) == 0 && (!e.Relational() || e.Type == "read" || dupes) {
					p = r.IntN(parts) // in another partition's batch
				}
				s.publish(p, e)
				for range r.IntN(3) {
					s.step(r.IntN(parts))
				}
			}
			s.drain()
			m := s.model()
			for id := uint64(1); id <= users; id++ {
				if got, want := s.unread(id), m.want(id); got != want {
					t.Fatalf("seed %d round %d: unread of %d = %+v, stream order %+v", seed, round, id, got, want)
				}
			}
		}
	}
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
	items, _, err := cold.List(s.stages[0].db, 0, cold.Follow, false, uint64(author), 10, "")
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
	if items, _, _ := cold.List(s.stages[0].db, 0, cold.Follow, false, uint64(author), 10, ""); len(items) != 1 || items[0].ID != uint64(f2) {
		t.Fatalf("after an unfollow the author's partition lists %v, want the second follower", items)
	}
}
