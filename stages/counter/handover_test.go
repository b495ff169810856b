package counter_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/natstest"
	"github.com/tally-dev/tally/store/checkpoint"
	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/cold/coldtest"
)

var errHeldBack = errors.New("held back by the test")

// partGate publishes change events, except the parts after the first of the checkpoint
// at position block: they fail, as if the owner died once its part 0 was stored.
type partGate struct {
	js      jetstream.JetStream
	block   atomic.Uint64
	passed  atomic.Int64 // part 0 of the blocked checkpoint stored
	refused atomic.Int64
}

func (g *partGate) PublishMsgAsync(msg *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	id := msg.Header.Get(jetstream.MsgIDHeader)
	if pos, ok := pipeline.ChangePos(id); ok && pos == g.block.Load() {
		if part := id[strings.LastIndexByte(id, '.')+1:]; part != "0" {
			g.refused.Add(1)
			return nil, errHeldBack
		}
		g.passed.Add(1)
	}
	return g.js.PublishMsgAsync(msg, opts...)
}

// bigBatch publishes one delta batch of source 0 liking ids first..first+n-1 once each
// and returns its stream position.
func (r *rig) bigBatch(seq uint64, first uint64, n int, want map[uint64]uint64) uint64 {
	r.t.Helper()
	b := pipeline.DeltaBatch{Source: 0, Seq: seq}
	for i := range uint64(n) {
		b.Deltas = append(b.Deltas, pipeline.Delta{ID: first + i, Field: 0, Op: pipeline.OpAdd, N: 1})
		want[first+i]++
	}
	msg := &nats.Msg{Subject: r.sc.Subjects.Delta(r.fam.Name, 0), Data: pipeline.AppendDeltaBatch(nil, &b),
		Header: nats.Header{jetstream.MsgIDHeader: []string{pipeline.DeltaMsgID(0, r.fam.Name+".0", seq)}}}
	ack, err := r.js.PublishMsg(context.Background(), msg)
	if err != nil {
		r.t.Fatal(err)
	}
	r.last = ack.Sequence
	return ack.Sequence
}

// checkpointedAt waits until db's checkpoint of the partition is at pos or later.
func (r *rig) checkpointedAt(db *cold.DB, pos uint64) {
	r.t.Helper()
	natstest.Eventually(r.t, 10*time.Second, "a checkpoint at "+strconv.FormatUint(pos, 10), func() (bool, string) {
		cp, err := checkpoint.LoadCheckpoint(db, r.fam.Name, 0)
		return err == nil && cp.Pos >= pos, fmt.Sprint("checkpoint at ", cp.Pos, " ", err)
	})
}

// mirrorEquals waits until the mirror of the changes stream (the last value per id) is
// want.
func (r *rig) mirrorEquals(want map[uint64]uint64) {
	r.t.Helper()
	natstest.Eventually(r.t, time.Minute, "the mirror of the changes stream to equal the counts", func() (bool, string) {
		got := r.mirror()
		if maps.Equal(got, want) {
			return true, ""
		}
		missing, stale := 0, 0
		for id, n := range want {
			switch v, ok := got[id]; {
			case !ok:
				missing++
			case v != n:
				stale++
			}
		}
		return false, fmt.Sprintf("%d ids of %d missing from the mirror, %d stale", missing, len(want), stale)
	})
}

// startGated starts an owner whose change events go through a gate, open for now.
func (r *rig) startGated() (*partGate, func() error) {
	gate := &partGate{js: r.js}
	gate.block.Store(1 << 62)
	cfg := r.config()
	cfg.Publisher = gate
	_, stop := r.start(cfg)
	return gate, stop
}

// Item 4: the owner dies after part 0 of a checkpoint of more than MaxChange ids is
// stored and before its other parts are. A standby must not take that part as the
// announcement of the whole checkpoint: it keeps its own checkpoints from that position
// on, and sends them once it owns the partition, so the mirror ends equal to the counts.
// (Before, it trimmed them up to that position and never announced the other parts' ids.)
func TestStandbyKeepsACheckpointAnnouncedInPart(t *testing.T) {
	r := newRig(t)
	gate, stopOwner := r.startGated()
	standby, promoted := r.startStandby()

	want := map[uint64]uint64{}
	seq := uint64(0)
	// Two small checkpoints on both, announced by the owner.
	for range 2 {
		seq++
		pos := r.bigBatch(seq, 1, 1, want)
		r.checkpointedAt(r.db, pos)
		r.checkpointedAt(standby, pos)
	}
	r.mirrorEquals(want)
	first, err := checkpoint.LoadChanges(standby, r.fam.Name, 0)
	if err != nil || len(first) == 0 {
		t.Fatalf("the standby's outbox: %d change events, %v", len(first), err)
	}
	// A checkpoint of 10 000 ids: three parts, of which only part 0 is stored.
	seq++
	gate.block.Store(r.last + 1)
	big := r.bigBatch(seq, 1000, 10_000, want)
	if big != gate.block.Load() {
		t.Fatalf("the batch is at %d, the gate holds back %d", big, gate.block.Load())
	}
	natstest.Eventually(t, 10*time.Second, "part 0 stored, the others refused", func() (bool, string) {
		return gate.passed.Load() > 0 && gate.refused.Load() > 1, fmt.Sprint(gate.passed.Load(), " passed, ", gate.refused.Load(), " refused")
	})
	r.checkpointedAt(standby, big)
	// The standby checkpoints again and trims what the owner announced: at least its
	// first checkpoint, below the owner's last whole one.
	natstest.Eventually(t, 10*time.Second, "the standby to trim its first checkpoint's events", func() (bool, string) {
		seq++
		r.bigBatch(seq, 2, 1, want)
		left, err := checkpoint.LoadChanges(standby, r.fam.Name, 0)
		if err != nil {
			t.Fatal(err)
		}
		return len(left) > 0 && left[0].Seq != first[0].Seq, fmt.Sprint(len(left), " change events left")
	})
	if err := stopOwner(); err != nil {
		t.Fatal(err)
	}
	promoted.Store(true)
	seq++
	r.bigBatch(seq, 3, 1, want)
	r.mirrorEquals(want)
}

// Item 4: a new owner restored from a backup older than the old owner's last checkpoint
// takes its own checkpoint at the same position as that one, holding more ids, split
// into parts otherwise. Its ids must not collide with the old owner's: a part dropped as
// a duplicate of the old owner's part 0 would hide its ids from every mirror. (Before,
// the ids were the position and the part number only.)
func TestRestoredOwnerChangeIDsDoNotCollide(t *testing.T) {
	r := newRig(t)
	gate, stopOwner := r.startGated()
	want := map[uint64]uint64{}
	pos := r.bigBatch(1, 1, 1, want)
	r.checkpointedAt(r.db, pos)
	var backup bytes.Buffer
	if err := r.db.Backup(&backup, cold.CounterKeys([]string{r.fam.Name}, 0)); err != nil {
		t.Fatal(err)
	}
	// After the backup: a checkpoint of ids 1000..4999, announced, then one at P of ids
	// 5000..9999 whose part 0 only is stored before the owner dies.
	pos = r.bigBatch(2, 1000, 4000, want)
	r.checkpointedAt(r.db, pos)
	r.mirrorEquals(want)
	gate.block.Store(r.last + 1)
	big := r.bigBatch(3, 5000, 5000, want)
	natstest.Eventually(t, 10*time.Second, "part 0 stored, the others refused", func() (bool, string) {
		return gate.passed.Load() > 0 && gate.refused.Load() > 0, fmt.Sprint(gate.passed.Load(), " passed, ", gate.refused.Load(), " refused")
	})
	if err := stopOwner(); err != nil {
		t.Fatal(err)
	}

	// The new owner restores the backup and replays batches 2 and 3: its first
	// checkpoint is at P too, with 9 000 ids.
	db := coldtest.Open(t, cold.Options{})
	if err := db.Restore(&backup, cold.CounterKeys([]string{r.fam.Name}, 0), t.TempDir()); err != nil {
		t.Fatal(err)
	}
	r.startOn(db, r.config())
	r.checkpointedAt(db, big)
	if cp, err := checkpoint.LoadCheckpoint(db, r.fam.Name, 0); err != nil || cp.Pos != big {
		t.Fatalf("the new owner's first checkpoint is at %d (%v), want %d", cp.Pos, err, big)
	}
	r.mirrorEquals(want)
}
