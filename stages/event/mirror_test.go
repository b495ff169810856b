package event

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/natstest"
	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/graph"
	"github.com/tally-dev/tally/store/stagelog"
)

// mirror runs a standby of partition 0 on a new database.
func (h *logHarness) mirror() *runningStage { return h.run("standby", nil, (*Stage).Mirror) }

// backup is partition 0's event state in db, byte for byte.
func (h *logHarness) backup(db *cold.DB) []byte {
	var b bytes.Buffer
	if err := db.Backup(&b, cold.EventKeys(0)); err != nil {
		h.t.Fatal(err)
	}
	return b.Bytes()
}

// A standby that mirrors the owner's log holds the owner's state key for key — its
// outbox too, from which the owner deletes what was acknowledged — and sends nothing; a
// takeover from it replays only the records after it and sends nothing new.
func TestMirrorCopiesOwner(t *testing.T) {
	h := newLogHarness(t)
	a := h.start("a.1", nil)
	f := h.mirror()
	deltas := h.msgs(h.sj.DeltasStream())
	for round := range 6 { // each transaction deletes what the one before sent
		h.likes(100*(round+1), 7+round%2, 30)
		h.caughtUp(a)
	}
	natstest.Eventually(t, 10*time.Second, "owner's outbox settled", func() (bool, string) {
		return !a.busy.Load(), "busy"
	})
	natstest.Eventually(t, 10*time.Second, "standby caught up", func() (bool, string) {
		return f.Position() == a.Position(), fmt.Sprintf("standby at %d, owner at %d", f.Position(), a.Position())
	})
	own, _, err := stagelog.Load(a.db, 0)
	if err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, "standby's state is the owner's", func() (bool, string) {
		got, want := h.backup(f.db), h.backup(a.db)
		return bytes.Equal(got, want), fmt.Sprintf("standby backup %d bytes, owner %d", len(got), len(want))
	})
	if h.msgs(h.sj.DeltasStream()) == deltas {
		t.Fatal("the owner sent no deltas")
	}

	// The owner stops with records the standby has not applied; the standby takes over.
	if err := f.stop(); err != nil {
		t.Fatal(err)
	}
	h.likes(900, 9, 10)
	h.caughtUp(a)
	natstest.Eventually(t, 10*time.Second, "owner's outbox settled", func() (bool, string) {
		return !a.busy.Load(), "busy"
	})
	sent := h.msgs(h.sj.DeltasStream())
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	b := h.start("b.1", f.db)
	h.caughtUp(b)
	if st := h.state(b.db); st.Pos <= own.Pos || st.Log <= own.Log {
		t.Fatalf("taken-over state %+v, the standby had %+v", st, own)
	}
	liked, err := graph.Related(b.db, 0, graph.Like, 905, []uint64{9})
	if err != nil || !liked[0] {
		t.Fatalf("the last record's like: %v, %v", liked, err)
	}
	natstest.Eventually(t, 5*time.Second, "outbox settled", func() (bool, string) {
		return !b.busy.Load(), "busy"
	})
	if n := h.msgs(h.sj.DeltasStream()); n != sent {
		t.Fatalf("deltas stream holds %d messages after the takeover, %d before: something was sent under a new id", n, sent)
	}
}

// mixed is n events of every kind an event stage writes for, among a few users and
// posts, so that the same records change again and again: likes and unlikes (user 1
// likes enough posts to be a heavy user), comments, follows and unfollows, posts (of
// authors followed by more readers than the fan-out limit, too), views with their
// viewers, mentions and reads.
func mixed(r *rand.Rand, n int) []pipeline.Event {
	evs := make([]pipeline.Event, n)
	user := func() pipeline.ID { return pipeline.ID(1 + r.IntN(12)) }
	for i := range evs {
		u, post := user(), pipeline.ID(1000+r.IntN(60))
		owner := pipeline.ID(1 + post%12)
		switch k := r.IntN(20); {
		case k < 6:
			if r.IntN(3) == 0 {
				u = 1
			}
			evs[i] = pipeline.Event{Type: pipeline.TypeLike, UID: u, Post: post, Owner: owner}
		case k < 8:
			evs[i] = pipeline.Event{Type: pipeline.TypeUnlike, UID: u, Post: post, Owner: owner}
		case k < 9:
			evs[i] = pipeline.Event{Type: pipeline.TypeComment, UID: u, Post: post, Owner: owner, Comment: pipeline.ID(5000 + i)}
		case k < 12:
			t := user()
			if t == u {
				t = u%12 + 1
			}
			typ := pipeline.TypeFollow
			if r.IntN(4) == 0 {
				typ = pipeline.TypeUnfollow
			}
			evs[i] = pipeline.Event{Type: typ, UID: u, Target: t}
		case k < 14:
			evs[i] = pipeline.Event{Type: pipeline.TypePost, UID: u, Post: pipeline.ID(100_000 + i)}
		case k < 17:
			evs[i] = pipeline.Event{Type: pipeline.TypeView, Post: post, UID: u, N: 1}
		case k < 19:
			evs[i] = pipeline.Event{Type: pipeline.TypeMention, UID: u, Target: owner, Post: post}
		default:
			evs[i] = pipeline.Event{Type: pipeline.TypeRead, UID: u, Kinds: []string{"like", "mention", "feed"}}
		}
	}
	return evs
}

// standbyCopies waits until standby f has applied everything owner a logged and holds
// a's keys and values (see sameKeys).
func (h *logHarness) standbyCopies(a, f *runningStage) {
	h.caughtUp(a)
	natstest.Eventually(h.t, 10*time.Second, "owner's outbox settled", func() (bool, string) {
		return !a.busy.Load(), "busy"
	})
	natstest.Eventually(h.t, 10*time.Second, "standby's state is the owner's", func() (bool, string) {
		if f.Position() != a.Position() {
			return false, fmt.Sprintf("standby at %d, owner at %d", f.Position(), a.Position())
		}
		return sameKeys(h, f.db, a.db)
	})
}

// A standby of an owner whose records carry their writes applies them: it executes no
// event and does not read the events stream, and holds the owner's state byte for byte
// through every kind of event; a takeover from it goes on from there.
func TestMirrorAppliesWrites(t *testing.T) {
	h := newLogHarness(t)
	h.logWrites, h.fanout = true, 3
	a := h.start("a.1", nil)
	f := h.mirror()
	r := rand.New(rand.NewPCG(5, 6))
	for range 8 {
		h.publish(mixed(r, 150)...)
		h.caughtUp(a)
	}
	h.standbyCopies(a, f)
	if w, e := f.stats.MirroredWrites.Load(), f.stats.MirroredEvents.Load(); w == 0 || e != 0 {
		t.Fatalf("the standby applied %d records from their writes and executed %d, want all from their writes", w, e)
	}
	if n := h.streamState(h.sj.EventsStream()).Consumers; n != 1 {
		t.Fatalf("the events stream has %d consumers with an owner and its standby running, want the owner's alone", n)
	}

	// The standby takes over and goes on; the owner, started again on its own state
	// once the standby's successor stops, replays what that one logged (from the
	// records' writes) and comes to the same state.
	if err := f.stop(); err != nil {
		t.Fatal(err)
	}
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	h.publish(mixed(r, 300)...)
	b := h.start("b.1", f.db)
	h.caughtUp(b)
	natstest.Eventually(t, 10*time.Second, "outbox settled", func() (bool, string) { return !b.busy.Load(), "busy" })
	if err := b.stop(); err != nil {
		t.Fatal(err)
	}
	c := h.start("c.1", a.db)
	h.caughtUp(c)
	natstest.Eventually(t, 10*time.Second, "the state taken over is the owner's", func() (bool, string) {
		if c.busy.Load() {
			return false, "busy"
		}
		return sameKeys(h, b.db, c.db)
	})
	if c.stats.ReplayedWrites.Load() == 0 {
		t.Fatal("the replay applied no record from its writes")
	}
}

// A standby following records with writes and records without (their transaction's
// writes too large for a record) applies the first and executes the second, and holds
// the owner's keys and values; what it keeps in RAM of the users it executes
// events of (a heavy liker's states, reader states) is read again after writes changed
// them.
func TestMirrorMixesWritesAndEvents(t *testing.T) {
	h := newLogHarness(t)
	h.logWrites, h.fanout, h.resident, h.payload = true, 3, 1<<20, 16<<10
	a := h.start("a.1", nil)
	f := h.mirror()
	r := rand.New(rand.NewPCG(7, 8))
	for round := range 16 {
		if round%2 == 0 {
			h.publish(mixed(r, 4)...) // small transactions: their writes fit in a record
		} else {
			h.publishBatch(mixed(r, 3000)) // one transaction whose writes do not
		}
		h.caughtUp(a)
	}
	h.standbyCopies(a, f)
	if w, e, out := f.stats.MirroredWrites.Load(), f.stats.MirroredEvents.Load(), a.stats.WritesLeftOut.Load(); w == 0 || e == 0 || out == 0 {
		t.Fatalf("the standby applied %d records from their writes and executed %d (the owner left out the writes of %d), want both kinds", w, e, out)
	}
}

// A new owner replaying the log from an empty state (as one restored from a backup
// replays what was logged after it) applies the records that carry their writes from
// them, executing no event of theirs, and executes the others; it comes to the owner's
// keys and values, and what it sends again goes under the ids the owner sent it.
func TestReplayAppliesWrites(t *testing.T) {
	h := newLogHarness(t)
	h.logWrites, h.fanout, h.resident, h.payload = true, 3, 1<<20, 16<<10
	a := h.start("a.1", nil)
	r := rand.New(rand.NewPCG(9, 10))
	for round := range 12 {
		if round%3 == 2 {
			h.publishBatch(mixed(r, 3000)) // a transaction whose writes do not fit in a record
		} else {
			h.publish(mixed(r, 4)...)
		}
		h.caughtUp(a)
	}
	natstest.Eventually(t, 10*time.Second, "owner's outbox settled", func() (bool, string) {
		return !a.busy.Load(), "busy"
	})
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	deltas := h.msgs(h.sj.DeltasStream())
	b := h.start("b.1", nil)
	h.caughtUp(b)
	natstest.Eventually(t, 10*time.Second, "the replayed state is the owner's", func() (bool, string) {
		if b.busy.Load() {
			return false, "busy"
		}
		return sameKeys(h, b.db, a.db)
	})
	written, executed := b.stats.ReplayedWrites.Load(), b.stats.Txns.Load()-b.stats.ReplayedWrites.Load()
	if written == 0 || executed == 0 || a.stats.WritesLeftOut.Load() == 0 {
		t.Fatalf("the replay applied %d records from their writes and executed %d (the owner left out the writes of %d), want both kinds", written, executed, a.stats.WritesLeftOut.Load())
	}
	if n := h.msgs(h.sj.DeltasStream()); n != deltas {
		t.Fatalf("the deltas stream holds %d messages after the replay, %d before: something was sent under a new id", n, deltas)
	}
}
