package event

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/natstest"
	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/delivery"
	"github.com/tally-dev/tally/store/stagelog"
)

// silent is a publisher whose publishes are never acknowledged: a stream that does not
// answer for now.
type silent struct{ sent atomic.Int64 }

type silentFuture struct{ msg *nats.Msg }

func (f silentFuture) Ok() <-chan *jetstream.PubAck { return nil }
func (f silentFuture) Err() <-chan error            { return nil }
func (f silentFuture) Msg() *nats.Msg               { return f.msg }

func (s *silent) PublishMsgAsync(msg *nats.Msg, _ ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	s.sent.Add(1)
	return silentFuture{msg}, nil
}

// A stage that starts with an outbox left from before (or a log to replay) has not
// caught up until that outbox is stored: Lag says 1 at least meanwhile. It said 0 until
// the stage's first batch of events, so that health found a partition caught up while
// the deltas a new owner re-sent were not in the stream yet.
func TestBusyUntilItsOutboxIsStored(t *testing.T) {
	h := newHarness(t, 1)
	db := leftOutbox(t, h)
	pub := &silent{}
	st, err := New(Config{Partition: 0, Partitions: 1, Subjects: h.sj, Families: pipeline.DefaultFamilies(), Publisher: pub},
		h.js, db, slog.New(slog.NewTextHandler(io.Discard, nil)), NewStats())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- st.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	natstest.Eventually(t, 10*time.Second, "the left outbox sent", func() (bool, string) {
		return pub.sent.Load() > 0, fmt.Sprint(pub.sent.Load(), " sent")
	})
	for range 5 {
		if lag, err := st.Lag(context.Background()); err != nil || lag == 0 {
			t.Fatalf("Lag %d (%v) while the outbox left from before is not stored, want at least 1", lag, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// leftOutbox is the database of partition 0 as a crash left it: one delta batch in its
// outbox, committed and not known stored. It is closed when the test ends.
func leftOutbox(t *testing.T, h *logHarness) *cold.DB {
	db, err := cold.Open(cold.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	b := pipeline.DeltaBatch{Source: 0, Seq: 1, Deltas: []pipeline.Delta{{ID: 1 << 41, Field: 0, Op: pipeline.OpAdd, N: 1}}}
	left := delivery.OutboxEntry{Seq: 1, Subject: h.sj.Delta(pipeline.FamilyPost, 0), MsgID: pipeline.DeltaMsgID(0, pipeline.FamilyPost+".0", 1),
		Data: pipeline.AppendDeltaBatch(nil, &b)}
	err = db.Update(func(txn *cold.Txn) error {
		if err := stagelog.PutOutbox(txn, 0, &left); err != nil {
			return err
		}
		return stagelog.Put(txn, 0, &stagelog.State{Seqs: map[string]uint64{pipeline.FamilyPost + ".0": 1}, Outbox: 1})
	})
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// losesFirstDelta publishes through js but for the first delta batch, which it drops
// silently: a publish lost in a server restart the client did not see, found only after
// the outbox's AckTimeout (10 s) — or once told on found, which fails it.
type losesFirstDelta struct {
	js    jetstream.JetStream
	sj    pipeline.Subjects
	lost  atomic.Bool
	found chan error
}

// lostFuture is a publish never acknowledged, failed with what found is told.
type lostFuture struct {
	silentFuture
	found chan error
}

func (f lostFuture) Err() <-chan error { return f.found }

func (p *losesFirstDelta) PublishMsgAsync(msg *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	if strings.HasPrefix(msg.Subject, p.sj.Prefix+".delta.") && p.lost.CompareAndSwap(false, true) {
		return lostFuture{silentFuture{msg}, p.found}, nil
	}
	return p.js.PublishMsgAsync(msg, opts...)
}

// A partition with nothing to apply waits for its outbox's acknowledgements only until a
// message comes: it waited for every one, so that a delta batch lost on its way (its
// acknowledgement awaited for AckTimeout, 10 s) held the partition's next events as long,
// and under load every event that came while acknowledgements were on their way waited
// for them.
func TestIdleOutboxWaitsNoEvent(t *testing.T) {
	h := newHarness(t, 1)
	pub := &losesFirstDelta{js: h.js, sj: h.sj, found: make(chan error, 1)}
	h.pub = pub
	r := h.start("a", nil)
	defer func() { pub.found <- errors.New("lost") }() // sent again: the stage stops without waiting it out
	h.likes(1, 1<<41, 1)
	natstest.Eventually(t, 10*time.Second, "the first delta batch lost", func() (bool, string) {
		return pub.lost.Load(), "not yet"
	})
	h.likes(2, 2<<41, 1) // to a partition idle since, its outbox waiting on the lost batch
	last := h.streamState(h.sj.EventsStream()).LastSeq
	start := time.Now()
	natstest.Eventually(t, 5*time.Second, "the second like applied", func() (bool, string) {
		return r.pos.Load() >= last, fmt.Sprintf("at %d of %d", r.pos.Load(), last)
	})
	t.Logf("the second like applied %v after it was stored", time.Since(start).Round(time.Millisecond))
	if lag, err := r.Lag(context.Background()); err != nil || lag == 0 {
		t.Fatalf("Lag %d (%v) while a delta batch is unacknowledged, want at least 1", lag, err)
	}
}

// A partition that starts with an outbox left from before sends it and goes on to its
// events without waiting for the acknowledgements: it waited for every one, so that a
// delta batch of that outbox lost on its way (found only after AckTimeout, 10 s) held
// the start of a new owner's partition as long. The receivers order what comes after a
// lost batch (the outbox's window), and the partition is not caught up (Lag) until the
// lost batch is stored.
func TestStartWaitsNoLostPublish(t *testing.T) {
	h := newHarness(t, 1)
	db := leftOutbox(t, h)
	pub := &losesFirstDelta{js: h.js, sj: h.sj, found: make(chan error, 1)}
	h.pub = pub
	r := h.start("a", db)
	natstest.Eventually(t, 10*time.Second, "the left delta batch lost", func() (bool, string) {
		return pub.lost.Load(), "not yet"
	})
	h.likes(1, 2<<41, 1)
	last := h.streamState(h.sj.EventsStream()).LastSeq
	start := time.Now()
	natstest.Eventually(t, 5*time.Second, "the like applied", func() (bool, string) {
		return r.pos.Load() >= last, fmt.Sprintf("at %d of %d", r.pos.Load(), last)
	})
	t.Logf("the like applied %v after it was stored, the left batch still unacknowledged", time.Since(start).Round(time.Millisecond))
	if lag, err := r.Lag(context.Background()); err != nil || lag == 0 {
		t.Fatalf("Lag %d (%v) while the left delta batch is unacknowledged, want at least 1", lag, err)
	}
	// Found lost: sent again, stored once, beside the like's batch.
	pub.found <- errors.New("lost")
	deltas := h.sj.Delta(pipeline.FamilyPost, 0)
	natstest.Eventually(t, 10*time.Second, "both delta batches stored", func() (bool, string) {
		info, err := h.js.Stream(context.Background(), h.sj.DeltasStream())
		if err != nil {
			return false, err.Error()
		}
		si, err := info.Info(context.Background(), jetstream.WithSubjectFilter(deltas))
		if err != nil {
			return false, err.Error()
		}
		n := si.State.Subjects[deltas]
		return n == 2, fmt.Sprint(n, " stored")
	})
	natstest.Eventually(t, 10*time.Second, "caught up", func() (bool, string) {
		lag, err := r.Lag(context.Background())
		return err == nil && lag == 0, fmt.Sprint("lag ", lag, " ", err)
	})
}
