package counter_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/natstest"
	"github.com/tally-dev/tally/store/checkpoint"
	"github.com/tally-dev/tally/store/cold"
)

// A standby's worker applies the partition's deltas beside its owner's and keeps only
// the change events the owner has not stored yet; taking over, it sends those, and the
// changes stream's last value of every id is its true count.
// startStandby starts a standby worker on a database of its own: it answers and
// announces nothing until promoted is set.
func (r *rig) startStandby() (*cold.DB, *atomic.Bool) {
	r.t.Helper()
	standby, err := cold.Open(cold.Options{Dir: r.t.TempDir()})
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { standby.Close() })
	promoted := new(atomic.Bool)
	cfg := r.config()
	cfg.Valid = promoted.Load
	r.startOn(standby, cfg)
	return standby, promoted
}

func TestStandbyWorkerTrimsAnnounced(t *testing.T) {
	r := newRig(t)
	_, stopOwner := r.start(r.config())
	standby, promoted := r.startStandby()

	want := map[uint64]uint64{}
	seq := uint64(0)
	like := func(id uint64) {
		seq++
		want[id]++
		r.publish(0, seq, id, 1)
	}
	outbox := func() int {
		left, err := checkpoint.LoadChanges(standby, r.fam.Name, 0)
		if err != nil {
			t.Fatal(err)
		}
		return len(left)
	}
	// A like every poll: each checkpoint leaves change events, which the standby drops
	// once the owner's are stored.
	grew := 0
	natstest.Eventually(t, 15*time.Second, "the standby's outbox trimmed", func() (bool, string) {
		like(uint64(1 + seq%5))
		grew = max(grew, outbox())
		return seq > 60 && outbox() <= 3, fmt.Sprintf("%d change events in the standby's outbox after %d likes", outbox(), seq)
	})
	if grew < 2 {
		t.Fatalf("the standby's outbox never held more than %d events: nothing was tried", grew)
	}

	// The owner stops; the standby takes over and sends what it kept.
	if err := stopOwner(); err != nil {
		t.Fatal(err)
	}
	like(7)
	like(1)
	promoted.Store(true)
	natstest.Eventually(t, 10*time.Second, "the changes stream's last values are the counts", func() (bool, string) {
		last := lastValues(t, r.js, r.sc.Subjects, r.fam.Name)
		for id, n := range want {
			if last[id] != n {
				return false, fmt.Sprintf("id %d: last change %d, count %d", id, last[id], n)
			}
		}
		return true, ""
	})
}

// lastValues reads the changes stream of family whole and keeps the last value of the
// first field of each id, as a mirror does.
func lastValues(t *testing.T, js jetstream.JetStream, sj pipeline.Subjects, family string) map[uint64]uint64 {
	ctx := context.Background()
	cons, err := js.OrderedConsumer(ctx, sj.ChangesStream(), jetstream.OrderedConsumerConfig{FilterSubjects: []string{sj.Changes(family)}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, sj.ChangesStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	last := map[uint64]uint64{}
	for read := uint64(0); read < info.State.Msgs; read++ {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var ch pipeline.Change
		if err := pipeline.Unmarshal(m.Data(), false, &ch); err != nil {
			t.Fatal(err)
		}
		for i, id := range ch.IDs {
			last[uint64(id)] = ch.Counts[i][0]
		}
	}
	return last
}

// A checkpoint follows the position even when what came last changed no count: batches
// sent again (duplicates) and batches held above a gap. A standby whose stored position
// stayed behind its owner's backup did not reflect it, and its partition was restored
// from the backup instead of taken over warm, on a failover and on a planned move alike.
func TestCheckpointFollowsDuplicates(t *testing.T) {
	r := newRig(t)
	w, _ := r.start(r.config())
	r.publish(0, 1, 42, 1)
	r.publish(0, 2, 42, 1)
	if n := r.likes(w, 42); n != 2 {
		t.Fatalf("likes %d, want 2", n)
	}
	r.checkpointedAt(r.db, r.last)
	// Batch 1 again, under a new message id as a re-send past the duplicate window.
	b := pipeline.DeltaBatch{Source: 0, Seq: 1, Deltas: []pipeline.Delta{{ID: 42, Field: 0, Op: pipeline.OpAdd, N: 1}}}
	ack, err := r.js.PublishMsg(context.Background(), &nats.Msg{Subject: r.sc.Subjects.Delta(r.fam.Name, 0),
		Data: pipeline.AppendDeltaBatch(nil, &b), Header: nats.Header{jetstream.MsgIDHeader: []string{"sent-again"}}})
	if err != nil {
		t.Fatal(err)
	}
	r.last = ack.Sequence
	if n := r.likes(w, 42); n != 2 {
		t.Fatalf("likes %d after a duplicate, want 2", n)
	}
	r.checkpointedAt(r.db, r.last)
	r.publish(0, 9, 42, 5) // held above the gap 3..8
	if n := r.likes(w, 42); n != 2 {
		t.Fatalf("likes %d after a held batch, want 2", n)
	}
	r.checkpointedAt(r.db, r.last)
}
