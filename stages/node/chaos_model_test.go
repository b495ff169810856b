package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline"
)

// chaosModel extends the reference model (counts, relations, notifications) with what the
// chaos workload adds — messages, reads by kind, system notices, incr, feed unread — and
// keeps everything in the events stream's order: pos numbers the events as stored.
type chaosModel struct {
	*model
	streamUnread
	pos    int
	byType map[string]int
}

func newChaosModel() *chaosModel {
	return &chaosModel{model: newModel(), streamUnread: newStreamUnread(), byType: map[string]int{}}
}

var chaosNotifyIndex = map[string]int{"comment": 0, "mention": 1, "like": 2, "dm": 3}

func (m *chaosModel) apply(e pipeline.Event) {
	m.pos++
	m.byType[e.Type]++
	uid, target := uint64(e.UID), uint64(e.Target)
	switch e.Type {
	case "dm":
		if uid != target {
			row(m.unread, target)[3]++
		}
	case "read":
		kinds := e.Kinds
		if len(kinds) == 0 {
			kinds = pipeline.UnreadKinds()
		}
		for _, k := range kinds {
			switch k = strings.ToLower(k); k {
			case "feed":
				m.feedRead[uid] = m.pos
			case "system":
				m.sysSeen[uid] = m.system
			default:
				row(m.unread, uid)[chaosNotifyIndex[k]] = 0
			}
		}
	case "system":
		m.system++
	case "incr":
		if e.Family == "post" {
			row(m.post, uint64(e.ID))[3] += uint64(e.N)
		} else {
			row(m.user, uint64(e.ID))[2] += uint64(e.N)
		}
	case "follow":
		if !m.follows[[2]uint64{uid, target}] && uid != target {
			m.followed[[2]uint64{uid, target}] = m.pos
		}
		m.model.apply(e)
	case "unfollow":
		delete(m.followed, [2]uint64{uid, target})
		m.model.apply(e)
	case "post":
		m.posted[uid] = append(m.posted[uid], m.pos)
		m.model.apply(e)
	default:
		m.model.apply(e)
	}
}

// want is a user's unread counts: notifications, system notices since their last
// system read, and posts of the accounts they follow stored after both the follow and
// their last feed read.
func (m *chaosModel) want(u uint64) pipeline.Unread { return m.counts(u, m.unread[u]) }

// chaosReadStream hands every message of a stream to fn, in order.
func chaosReadStream(ctx context.Context, js jetstream.JetStream, stream string, fn func(m jetstream.Msg, seq uint64) error) error {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return err
	}
	last := st.CachedInfo().State.LastSeq
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return err
	}
	for seq := uint64(0); seq < last; {
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return err
		}
		n := 0
		for msg := range batch.Messages() {
			n++
			md, err := msg.Metadata()
			if err != nil {
				return err
			}
			seq = md.Sequence.Stream
			if err := fn(msg, seq); err != nil {
				return err
			}
		}
		if batch.Error() != nil {
			return batch.Error()
		}
		if n == 0 {
			return fmt.Errorf("stream %s read up to %d of %d", stream, seq, last)
		}
	}
	return nil
}

// chaosStored is what the producers of the test stored in the events stream.
type chaosStored struct {
	perTx       map[string]int // events stored per transaction (by distinct message id)
	msgs, again int            // messages, and those stored more than once (a retry after the window)
	bad         int            // invalid events (to be dead-lettered)
}

// chaosStoredEvents reads the whole events stream in order and applies to m every event
// a producer of the test stored (message ids starting with "chaos."), skipping what Tally
// itself re-published there (forwarded events, copies of notices).
func chaosStoredEvents(ctx context.Context, js jetstream.JetStream, sj pipeline.Subjects, m *chaosModel) (*chaosStored, error) {
	st := &chaosStored{perTx: map[string]int{}}
	seen := map[string]bool{}
	err := chaosReadStream(ctx, js, sj.EventsStream(), func(msg jetstream.Msg, seq uint64) error {
		id := msg.Headers().Get(jetstream.MsgIDHeader)
		if !strings.HasPrefix(id, "chaos.") {
			return nil
		}
		parts := strings.Split(msg.Subject(), ".") // <prefix>.ep.<p>.<type>.<key>
		typ := parts[len(parts)-2]
		evs, bad, err := pipeline.DecodeEvents(typ, msg.Data(), msg.Headers(), pipeline.DefaultFamilies())
		if err != nil && typ == pipeline.TypeBatch {
			return fmt.Errorf("stored batch %s at %d does not decode: %w", id, seq, err)
		}
		st.msgs++
		if err != nil { // an invalid single event
			bad = append(bad, pipeline.BadEvent{Index: -1})
		}
		tx := strings.Join(strings.SplitN(id, ".", 3)[:2], ".")
		if seen[id] {
			st.again++
		} else {
			seen[id] = true
			st.perTx[tx] += len(evs) + len(bad)
		}
		st.bad += len(bad)
		for _, e := range evs {
			m.apply(e)
		}
		return nil
	})
	return st, err
}

// chaosDeadLetters counts the distinct events dead-lettered (by stream position and index).
func chaosDeadLetters(ctx context.Context, js jetstream.JetStream, sj pipeline.Subjects) (int, error) {
	seen := map[[2]int64]bool{}
	err := chaosReadStream(ctx, js, sj.DLQStream(), func(msg jetstream.Msg, _ uint64) error {
		var dl struct {
			Seq   uint64 `json:"seq"`
			Index int    `json:"index"`
		}
		if err := json.Unmarshal(msg.Data(), &dl); err != nil {
			return fmt.Errorf("dead letter: %w", err)
		}
		seen[[2]int64{int64(dl.Seq), int64(dl.Index)}] = true
		return nil
	})
	return len(seen), err
}

// changeMirror reads the whole changes stream in order and keeps the last value per id
// of each family, as a subscriber to tally.chg.* would.
func changeMirror(ctx context.Context, js jetstream.JetStream, sj pipeline.Subjects) (map[string]map[uint64][]uint64, int, error) {
	mirror := map[string]map[uint64][]uint64{}
	msgs := 0
	err := chaosReadStream(ctx, js, sj.ChangesStream(), func(msg jetstream.Msg, seq uint64) error {
		parts := strings.Split(msg.Subject(), ".") // <prefix>.chg.<family>.<p>
		fam := parts[len(parts)-2]
		var ch pipeline.Change
		if err := pipeline.Unmarshal(msg.Data(), false, &ch); err != nil {
			return fmt.Errorf("change event at %d: %w", seq, err)
		}
		msgs++
		if mirror[fam] == nil {
			mirror[fam] = map[uint64][]uint64{}
		}
		for i, id := range ch.IDs {
			mirror[fam][uint64(id)] = ch.Counts[i]
		}
		return nil
	})
	return mirror, msgs, err
}

// chaosGen makes the chaos workload. Users 1..quiet read notifications only in quiet
// phases (everything before applied, nothing else in flight), so their unread counts
// are exact whatever the interleaving; users after them (racing) read at any time,
// mixed with the notifications they get from other partitions. Forward users, after
// both, make their relations only through raw batches (so they are forwarded to their
// own partition), in two halves taking turns: a half relates in one cycle and undoes
// some of that in the next, directly, once everything forwarded has been applied.
type chaosGen struct {
	r                  *rand.Rand
	quiet, racing, fwd int
	posts              int
	comment            uint64
	made, undo         [][2]uint64 // forward relations (like: post, follow: target) of this cycle, of the last
	madeKind, undoKind []string
	relations          map[[3]uint64]bool // forward relations made this cycle
	cycle              int
	tx                 int
}

func (g *chaosGen) users() int { return g.quiet + g.racing + g.fwd }

// actor is a quiet or racing user.
func (g *chaosGen) actor() pipeline.ID { return pipeline.ID(1 + g.r.IntN(g.quiet+g.racing)) }
func (g *chaosGen) racer() pipeline.ID { return pipeline.ID(g.quiet + 1 + g.r.IntN(g.racing)) }
func (g *chaosGen) post() pipeline.ID  { return pipeline.ID(1<<41 + g.r.IntN(g.posts)) }
func (g *chaosGen) owner(p pipeline.ID) pipeline.ID {
	return pipeline.ID(1 + uint64(p)%uint64(g.quiet+g.racing))
}

// forwarder is a user of the half making forward relations this cycle.
func (g *chaosGen) forwarder() pipeline.ID {
	half := g.fwd / 2
	return pipeline.ID(g.quiet + g.racing + 1 + (g.cycle%2)*half + g.r.IntN(half))
}

func (g *chaosGen) other(u pipeline.ID) pipeline.ID {
	t := g.actor()
	if t == u {
		t = u%pipeline.ID(g.quiet+g.racing) + 1
	}
	return t
}

// nextCycle makes this cycle's forward relations the ones to undo in the next.
func (g *chaosGen) nextCycle() {
	g.cycle++
	g.undo, g.undoKind, g.made, g.madeKind = g.made, g.madeKind, nil, nil
	clear(g.relations)
}

func chaosKinds(r *rand.Rand, without string) []string {
	var kinds []string
	for _, k := range pipeline.UnreadKinds() {
		if k != without && r.IntN(2) == 0 {
			kinds = append(kinds, k)
		}
	}
	return kinds // empty: every kind
}

// event is one event of an ordinary batch: every type, by quiet and racing users, and
// the direct undoing of last cycle's forward relations.
func (g *chaosGen) event() pipeline.Event {
	u, p := g.actor(), g.post()
	switch n := g.r.IntN(100); {
	case n < 18:
		return pipeline.Event{Type: "like", UID: u, Post: p, Owner: g.owner(p)}
	case n < 26:
		return pipeline.Event{Type: "unlike", UID: u, Post: p}
	case n < 33:
		return pipeline.Event{Type: "view", Post: p, N: int64(g.r.IntN(4))}
	case n < 36:
		return pipeline.Event{Type: "repost", UID: u, Post: p}
	case n < 43:
		g.comment++
		return pipeline.Event{Type: "comment", UID: u, Post: p, Comment: pipeline.ID(g.comment%40 + 1), Owner: g.owner(p)}
	case n < 46:
		return pipeline.Event{Type: "uncomment", UID: u, Post: p, Comment: pipeline.ID(g.r.IntN(40) + 1)}
	case n < 54:
		return pipeline.Event{Type: "follow", UID: u, Target: g.other(u)}
	case n < 58:
		return pipeline.Event{Type: "unfollow", UID: u, Target: g.other(u)}
	case n < 64:
		return pipeline.Event{Type: "post", UID: u, Post: p}
	case n < 69:
		return pipeline.Event{Type: "mention", UID: u, Target: g.actor()}
	case n < 74:
		return pipeline.Event{Type: "dm", UID: u, Target: g.actor()}
	case n < 78:
		if g.r.IntN(2) == 0 {
			return pipeline.Event{Type: "incr", Family: "post", ID: p, Field: "view", N: int64(1 + g.r.IntN(5))}
		}
		return pipeline.Event{Type: "incr", Family: "user", ID: u, Field: "post", N: int64(1 + g.r.IntN(3))}
	case n < 80:
		return pipeline.Event{Type: "system", ID: pipeline.ID(1 + g.r.IntN(1<<20))}
	case n < 89:
		if g.r.IntN(3) == 0 { // a quiet user may read their feed at any time
			return pipeline.Event{Type: "read", UID: pipeline.ID(1 + g.r.IntN(g.quiet)), Kinds: []string{"feed"}}
		}
		kinds := chaosKinds(g.r, "")
		if len(kinds) > 0 && g.r.IntN(4) == 0 { // kinds are compared case-insensitively
			kinds[0] = strings.ToUpper(kinds[0])
		}
		return pipeline.Event{Type: "read", UID: g.racer(), Kinds: kinds}
	case n < 90: // invalid: dead-lettered alone, the rest of its batch applied
		switch g.r.IntN(4) {
		case 0:
			return pipeline.Event{Type: "read", UID: u, Kinds: []string{"bogus"}}
		case 1:
			return pipeline.Event{Type: "incr", Family: "nope", ID: p, Field: "view", N: 1}
		case 2:
			return pipeline.Event{Type: "follow", UID: u, Target: u}
		default:
			return pipeline.Event{Type: "like", UID: u}
		}
	default:
		if len(g.undo) == 0 {
			return pipeline.Event{Type: "view", Post: p, N: 1}
		}
		i := g.r.IntN(len(g.undo))
		k := g.undo[i]
		if g.undoKind[i] == "like" {
			return pipeline.Event{Type: "unlike", UID: pipeline.ID(k[0]), Post: pipeline.ID(k[1])}
		}
		return pipeline.Event{Type: "unfollow", UID: pipeline.ID(k[0]), Target: pipeline.ID(k[1])}
	}
}

// rawEvent is one event of a raw batch, published under one key: relations of forward
// users (forwarded to their partitions), views and notices applied where the batch
// lands, reads of racing users (forwarded).
func (g *chaosGen) rawEvent() pipeline.Event {
	u, p := g.forwarder(), g.post()
	// A relation is made at most once a cycle: two copies of it in raw batches of
	// different partitions reach its own partition in either order, so which one made
	// it (and where its notification or follow is placed) is not the stream's to say.
	fresh := func(kind string, x pipeline.ID) bool {
		k := [3]uint64{boolInt(kind == "follow"), uint64(u), uint64(x)}
		if g.relations[k] {
			return false
		}
		if g.relations == nil {
			g.relations = map[[3]uint64]bool{}
		}
		g.relations[k] = true
		g.made, g.madeKind = append(g.made, [2]uint64{uint64(u), uint64(x)}), append(g.madeKind, kind)
		return true
	}
	switch n := g.r.IntN(100); {
	case n < 45 && fresh("like", p):
		return pipeline.Event{Type: "like", UID: u, Post: p, Owner: g.owner(p)}
	case n >= 45 && n < 70:
		if t := g.actor(); fresh("follow", t) {
			return pipeline.Event{Type: "follow", UID: u, Target: t}
		}
		return pipeline.Event{Type: "view", Post: p, N: 1}
	case n < 90:
		return pipeline.Event{Type: "view", Post: p, N: int64(1 + g.r.IntN(3))}
	case n < 93:
		return pipeline.Event{Type: "system", ID: pipeline.ID(1 + g.r.IntN(1<<20))}
	default:
		return pipeline.Event{Type: "read", UID: g.racer(), Kinds: chaosKinds(g.r, "")}
	}
}

// quietReads are reads of notifications and notices by quiet users, for a quiet phase.
func (g *chaosGen) quietReads() []pipeline.Event {
	var evs []pipeline.Event
	for u := 1; u <= g.quiet; u++ {
		if g.r.IntN(3) == 0 {
			evs = append(evs, pipeline.Event{Type: "read", UID: pipeline.ID(u), Kinds: chaosKinds(g.r, "feed")})
		}
	}
	return evs
}

// TestChaosModel pins the model's reading of the stream's order: a read covers exactly
// the events before it; a follow sees only later posts; an unfollow takes them back.
func TestChaosModel(t *testing.T) {
	m := newChaosModel()
	for _, e := range []pipeline.Event{
		{Type: "post", UID: 2, Post: 10},
		{Type: "follow", UID: 1, Target: 2},
		{Type: "post", UID: 2, Post: 11},
		{Type: "read", UID: 1, Kinds: []string{"feed"}},
		{Type: "post", UID: 2, Post: 12},
		{Type: "follow", UID: 1, Target: 3},
		{Type: "post", UID: 3, Post: 13},
		{Type: "unfollow", UID: 1, Target: 3},
		{Type: "like", UID: 3, Post: 10, Owner: 1},
		{Type: "read", UID: 1, Kinds: []string{"like"}},
		{Type: "like", UID: 4, Post: 10, Owner: 1},
		{Type: "like", UID: 4, Post: 10, Owner: 1}, // liked already
		{Type: "dm", UID: 4, Target: 1},
		{Type: "dm", UID: 1, Target: 1}, // to oneself
		{Type: "system", ID: 1},
		{Type: "read", UID: 1, Kinds: []string{"system"}},
		{Type: "system", ID: 2},
		{Type: "incr", Family: "post", ID: 10, Field: "view", N: 3},
		{Type: "read", UID: 5}, // every kind
	} {
		m.apply(e)
	}
	if got, want := m.want(1), (pipeline.Unread{Like: 1, DM: 1, System: 1, Feed: 1}); got != want {
		t.Fatalf("unread of 1: %+v, want %+v", got, want)
	}
	if got, want := m.want(5), (pipeline.Unread{}); got != want {
		t.Fatalf("unread of 5 after reading everything: %+v, want %+v", got, want)
	}
	if got := *m.post[10]; got != [4]uint64{2, 0, 0, 3} {
		t.Fatalf("post 10: %v, want 2 likes and 3 views", got)
	}
}
