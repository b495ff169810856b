package flow

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestAheadRecordsOnlyWhatATrackedUserHasNotApplied: a reader no Meter tracks (a
// standby's, a log's) records nothing, however much it delivers; a tracked one holds only
// what was delivered past its user's position, and tells a lag only from a position it
// saw everything after.
func TestAheadRecordsOnlyWhatATrackedUserHasNotApplied(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	md := func(seq, pending uint64) *jetstream.MsgMetadata {
		return &jetstream.MsgMetadata{Sequence: jetstream.SequencePair{Stream: seq}, NumPending: pending, Timestamp: t0.Add(time.Duration(seq) * time.Second)}
	}
	a := ahead{last: 2} // a reader started after position 2
	for seq := uint64(3); seq < 10_003; seq++ {
		a.note(md(seq, 0))
	}
	if len(a.q) != 0 {
		t.Fatalf("untracked: %d deliveries recorded, want none", len(a.q))
	}
	if _, ok := a.behind(3, t0); ok {
		t.Fatal("untracked: a lag told")
	}

	var applied atomic.Uint64
	applied.Store(10_000)
	a.track(&applied) // from 10 002, the last delivered
	a.note(md(10_003, 0))
	a.note(md(10_005, 7)) // 10 004 another subject's
	if _, ok := a.behind(10_001, t0); ok {
		t.Error("a lag told from a position before tracking began: 10 002 was not recorded")
	}
	now := t0.Add(20_000 * time.Second)
	if b, ok := a.behind(10_002, now); !ok || b != (Behind{Msgs: 10_005 - 10_002 + 7, Age: now.Sub(t0.Add(10_003 * time.Second)), Pos: 10_002}) {
		t.Errorf("behind(10 002) = %+v %v", b, ok)
	}
	if _, ok := a.behind(10_005, now); ok {
		t.Error("a lag told where everything delivered is applied: only the stream can tell")
	}

	// Applied as delivered: what is recorded stays within what is not applied.
	for seq := uint64(10_006); seq < 20_000; seq++ {
		applied.Store(seq - 2)
		a.note(md(seq, 0))
		if len(a.q) > 8 {
			t.Fatalf("%d recorded with 2 not applied", len(a.q))
		}
	}
	a.blind()
	if _, ok := a.behind(19_997, now); ok {
		t.Error("a lag told after a delivery went unrecorded")
	}
}
