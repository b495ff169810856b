package systest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/stages/reference"
)

// chaosStored is what the producers of the test stored in the events stream.
type chaosStored struct {
	perTx       map[string]int // events stored per transaction (by distinct message id)
	msgs, again int            // messages, and those stored more than once (a retry after the window)
	bad         int            // invalid events (to be dead-lettered)
}

// chaosStoredEvents is the reference model of every event a producer of the test stored
// (message ids starting with "chaos."), in the stream's order, and what was stored.
func chaosStoredEvents(ctx context.Context, js jetstream.JetStream, sj pipeline.Subjects) (*reference.Model, *chaosStored, error) {
	st := &chaosStored{perTx: map[string]int{}}
	seen := map[string]bool{}
	m := reference.NewOf(chaosFamilies())
	n, err := m.Stored(ctx, js, sj, "chaos.", func(msg jetstream.Msg, valid, invalid int) {
		id := msg.Headers().Get(jetstream.MsgIDHeader)
		tx := strings.Join(strings.SplitN(id, ".", 3)[:2], ".")
		if seen[id] {
			st.again++
		} else {
			seen[id] = true
			st.perTx[tx] += valid + invalid
		}
		st.bad += invalid
	})
	st.msgs = n
	return m, st, err
}

// chaosDeadLetters counts the distinct events dead-lettered (by stream position and index).
func chaosDeadLetters(ctx context.Context, js jetstream.JetStream, sj pipeline.Subjects) (int, error) {
	seen := map[[2]int64]bool{}
	err := reference.ReadStream(ctx, js, sj.DLQStream(), func(msg jetstream.Msg, _ uint64, _ time.Time) error {
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
	err := reference.ReadStream(ctx, js, sj.ChangesStream(), func(msg jetstream.Msg, seq uint64, _ time.Time) error {
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

// chaosGen makes the chaos workload: every event type over few users and posts, so that
// relations are made and undone again and again, by every road — batches split by
// partition, batches not split (whose relation events Tally forwards), single events —
// while a kill, a NATS restart or a backlog holds partitions back. Reads come at any
// time; a reads phase after each cycle also reads while nothing else is in flight.
type chaosGen struct {
	r            *rand.Rand
	users, posts int
	comment      uint64
	tx           int
}

func (g *chaosGen) actor() pipeline.ID { return pipeline.ID(1 + g.r.IntN(g.users)) }
func (g *chaosGen) post() pipeline.ID  { return pipeline.ID(1<<41 + g.r.IntN(g.posts)) }
func (g *chaosGen) owner(p pipeline.ID) pipeline.ID {
	return pipeline.ID(1 + uint64(p)%uint64(g.users))
}

func (g *chaosGen) other(u pipeline.ID) pipeline.ID {
	t := g.actor()
	if t == u {
		t = u%pipeline.ID(g.users) + 1
	}
	return t
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

// ids are every id of family the workload may count: its posts, or its users.
func (g *chaosGen) ids(family string) []uint64 {
	var ids []uint64
	if family == "post" {
		for p := range g.posts {
			ids = append(ids, uint64(1<<41+p))
		}
		return ids
	}
	for u := 1; u <= g.users; u++ {
		ids = append(ids, uint64(u))
	}
	return ids
}

// event is one event of any batch or a single event: every type, invalid ones too.
func (g *chaosGen) event() pipeline.Event {
	u, p := g.actor(), g.post()
	switch n := g.r.IntN(100); {
	case n < 20:
		return pipeline.Event{Type: "like", UID: u, Post: p, Owner: g.owner(p)}
	case n < 30:
		return pipeline.Event{Type: "unlike", UID: u, Post: p}
	case n < 37:
		return view(u, p, int64(g.r.IntN(4)), n%2 == 0)
	case n < 40:
		return pipeline.Event{Type: "repost", UID: u, Post: p}
	case n < 47:
		g.comment++
		return pipeline.Event{Type: "comment", UID: u, Post: p, Comment: pipeline.ID(g.comment%40 + 1), Owner: g.owner(p)}
	case n < 51:
		return pipeline.Event{Type: "uncomment", UID: u, Post: p, Comment: pipeline.ID(g.r.IntN(40) + 1)}
	case n < 59:
		return pipeline.Event{Type: "follow", UID: u, Target: g.other(u)}
	case n < 64:
		return pipeline.Event{Type: "unfollow", UID: u, Target: g.other(u)}
	case n < 70:
		return pipeline.Event{Type: "post", UID: u, Post: p}
	case n < 75:
		return pipeline.Event{Type: "mention", UID: u, Target: g.actor()}
	case n < 80:
		return pipeline.Event{Type: "dm", UID: u, Target: g.actor()}
	case n < 84:
		if g.r.IntN(2) == 0 {
			return pipeline.Event{Type: "incr", Family: "post", ID: p, Field: "view", N: int64(1 + g.r.IntN(5))}
		}
		return pipeline.Event{Type: "incr", Family: "user", ID: u, Field: "post", N: int64(1 + g.r.IntN(3))}
	case n < 86:
		return pipeline.Event{Type: "system", ID: pipeline.ID(1 + g.r.IntN(1<<20))}
	case n < 95:
		kinds := chaosKinds(g.r, "")
		if len(kinds) > 0 && g.r.IntN(4) == 0 { // kinds are compared case-insensitively
			kinds[0] = strings.ToUpper(kinds[0])
		}
		return pipeline.Event{Type: "read", UID: u, Kinds: kinds}
	default: // invalid: dead-lettered alone, the rest of its batch applied
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
	}
}

// rawEvent is one event of a batch not split by partition: what a producer may put in
// one (no system or incr, which need the admin grant).
func (g *chaosGen) rawEvent() pipeline.Event {
	for {
		if e := g.event(); !e.Privileged() {
			return e
		}
	}
}

// reads are reads of some users, for a reads phase.
func (g *chaosGen) reads() []pipeline.Event {
	var evs []pipeline.Event
	for u := 1; u <= g.users; u++ {
		if g.r.IntN(4) == 0 {
			evs = append(evs, pipeline.Event{Type: "read", UID: pipeline.ID(u), Kinds: chaosKinds(g.r, "")})
		}
	}
	return evs
}

// chaosEach compares the post and user counts with the model after every cycle
// (TALLY_CHAOS_EACH): a count that goes wrong is found in the cycle it went wrong in,
// whose faults and log lines say how, where the end of a long run only says that it
// did. Its model reads the events stream a cycle at a time.
type chaosEach struct {
	t     *testing.T
	c     *client.Client
	js    jetstream.JetStream
	g     *chaosGen
	ref   *reference.Model
	read  uint64 // the last sequence of the events stream ref has read
	wrong string // what was wrong after the last cycle checked
	// backups counts the state backups read back after the cycles; corrupt lists those
	// refused by their digest.
	backups int
	corrupt []string
}

// readBackups reads back every state backup stored (every object of the state bucket):
// each must pass its digest. One stored with its chunks out of order failed only when a
// partition was restored from it (TestPutObjectNotReordered) — once in three soaks, and
// harmless twice, as a newer backup replaced it first.
func (e *chaosEach) readBackups(cycle int) {
	ctx := context.Background()
	obs, err := e.js.ObjectStore(ctx, e.c.Subjects().StateBucket())
	if err != nil {
		e.t.Logf("chaos: after cycle %d: cannot open the state bucket: %v", cycle, err)
		return
	}
	infos, err := obs.List(ctx)
	if err != nil {
		if !errors.Is(err, jetstream.ErrNoObjectsFound) {
			e.t.Logf("chaos: after cycle %d: cannot list the state backups: %v", cycle, err)
		}
		return
	}
	for _, info := range infos {
		if info.Deleted {
			continue
		}
		_, err := obs.GetBytes(ctx, info.Name)
		switch {
		case errors.Is(err, jetstream.ErrDigestMismatch):
			e.corrupt = append(e.corrupt, fmt.Sprintf("%s (after cycle %d)", info.Name, cycle))
		case err == nil:
			e.backups++
		} // else swept meanwhile, or NATS slow: the next cycle reads it again
	}
}

// check compares the counts once every event stored is applied (the cycle's reads
// applied), and logs when what it finds wrong changes. A nil chaosEach checks nothing.
func (e *chaosEach) check(cycle int) {
	if e == nil {
		return
	}
	chaosRead(e.t, "the events stream", func() (err error) {
		_, e.read, err = e.ref.StoredAfter(context.Background(), e.js, e.c.Subjects(), "chaos.", e.read, nil)
		return err
	})
	var wrong []string
	for _, fam := range []string{"post", "user"} {
		got := chaosGet(e.t, e.c, fam, e.g.ids(fam))
		for _, id := range slices.Sorted(maps.Keys(got)) {
			if w := e.ref.Counts(fam, id); !slices.Equal(got[id], w) {
				wrong = append(wrong, fmt.Sprintf("%s %d: tally %v, model %v", fam, id, got[id], w))
			}
		}
	}
	e.readBackups(cycle)
	if now := strings.Join(wrong, "; "); now != e.wrong {
		e.t.Logf("chaos: after cycle %d (%s, events stream read to %d): %d counts differ from the model: %s",
			cycle, time.Now().UTC().Format(time.RFC3339Nano), e.read, len(wrong), strings.Join(wrong[:min(len(wrong), 8)], "; "))
		e.wrong = now
	}
}
