package event

import (
	"bytes"
	"fmt"
	"testing"
	"time"

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
