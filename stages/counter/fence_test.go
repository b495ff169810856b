package counter_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/natstest"
)

// latePublisher publishes change events, except that once armed it holds the next one
// back — as a paused process's client buffer, a stalled connection or a delayed retry
// would — until the test lets it go, with the options it was given.
type latePublisher struct {
	js    jetstream.JetStream
	armed atomic.Bool
	mu    sync.Mutex
	msg   *nats.Msg
	opts  []jetstream.PublishOpt
	fut   *heldFuture
}

type heldFuture struct {
	msg *nats.Msg
	ok  chan *jetstream.PubAck
	err chan error
}

func (f *heldFuture) Ok() <-chan *jetstream.PubAck { return f.ok }
func (f *heldFuture) Err() <-chan error            { return f.err }
func (f *heldFuture) Msg() *nats.Msg               { return f.msg }

func (p *latePublisher) PublishMsgAsync(msg *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	if !p.armed.CompareAndSwap(true, false) {
		return p.js.PublishMsgAsync(msg, opts...)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.msg, p.opts = msg, opts
	p.fut = &heldFuture{msg: msg, ok: make(chan *jetstream.PubAck, 1), err: make(chan error, 1)}
	return p.fut, nil
}

func (p *latePublisher) held() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fut != nil
}

// release stores the held publish now and returns what the server answered.
func (p *latePublisher) release() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	ack, err := p.js.PublishMsg(context.Background(), p.msg, p.opts...)
	if err != nil {
		p.fut.err <- err
	} else {
		p.fut.ok <- ack
	}
	return err
}

// An owner paused past its lease while another took the partition over: its change
// event, held back all the while, reaches the stream after the new owner announced a
// newer value of the same id. Stored, it would be every mirror's last word on the id
// for as long as the id does not change again (TestChaosCluster, 12-01: a post's
// change-event mirror one comment behind its count). Each change event expects the last
// one on its partition's subject to be the one its owner stored before it, so the late
// one is refused.
func TestPausedOwnersLateChangeEventFenced(t *testing.T) {
	r := newRig(t)
	late := &latePublisher{js: r.js}
	var valid atomic.Bool
	valid.Store(true)
	cfg := r.config()
	cfg.Publisher, cfg.Valid = late, valid.Load
	r.start(cfg)
	standby, promoted := r.startStandby()

	const x = 7
	want := map[uint64]uint64{}
	pos := r.bigBatch(1, x, 1, want)
	r.checkpointedAt(r.db, pos)
	r.checkpointedAt(standby, pos)
	r.mirrorEquals(want)

	late.armed.Store(true)
	pos = r.bigBatch(2, x, 1, want)
	r.checkpointedAt(r.db, pos)
	natstest.Eventually(t, 5*time.Second, "the owner's change event of the second like held", func() (bool, string) {
		return late.held(), "not sent yet"
	})
	// The owner pauses past its lease; the standby takes over and announces the third.
	valid.Store(false)
	promoted.Store(true)
	pos = r.bigBatch(3, x, 1, want)
	r.checkpointedAt(standby, pos)
	r.mirrorEquals(want)

	err := late.release()
	if got := r.mirror()[x]; got != want[x] {
		t.Fatalf("after the paused owner's change event reached the stream (%v), the mirror says %d likes of %d, the count is %d", err, got, x, want[x])
	}
	if err == nil {
		t.Fatalf("the paused owner's change event was stored")
	}
	natstest.Eventually(t, 5*time.Second, "the paused owner to count the fence", func() (bool, string) {
		return r.stats.ChangesFenced.Load() == 1, fmt.Sprint(r.stats.ChangesFenced.Load(), " fenced")
	})
}

// The owner finds a change event it did not publish last on its subject (an older
// version's owner, a tool, one stored before it took over): it goes on after it, and
// the mirror still ends equal to the counts.
func TestChangeEventsGoOnAfterAnotherWriter(t *testing.T) {
	r := newRig(t)
	w, _ := r.start(r.config())
	want := map[uint64]uint64{}
	r.bigBatch(1, 1, 3, want)
	r.likes(w, 1)
	r.mirrorEquals(want)

	other := pipeline.Change{Fields: r.fam.Fields, IDs: []pipeline.ID{1000}, Counts: [][]uint64{make([]uint64, len(r.fam.Fields))}}
	data, err := pipeline.Marshal(&other, false)
	if err != nil {
		t.Fatal(err)
	}
	msg := &nats.Msg{Subject: r.sc.Subjects.Change(r.fam.Name, 0), Data: data, Header: nats.Header{jetstream.MsgIDHeader: []string{"not-a-change-id"}}}
	if _, err := r.js.PublishMsg(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	want[1000] = 0
	for seq := uint64(2); seq < 5; seq++ {
		r.bigBatch(seq, 1, 2, want)
	}
	r.mirrorEquals(want)
	st, err := r.js.Stream(context.Background(), r.sc.Subjects.ChangesStream())
	if err != nil {
		t.Fatal(err)
	}
	last, err := st.GetLastMsgForSubject(context.Background(), r.sc.Subjects.Change(r.fam.Name, 0))
	if err != nil {
		t.Fatal(err)
	}
	if h := last.Header.Get(jetstream.ExpectedLastSubjSeqHeader); h == "" || h == "0" {
		t.Fatalf("the last change event expected %q as the subject's last: want the sequence of the one before it", h)
	}
	if got := r.likes(w, 2); got != want[2] {
		t.Fatalf("likes of 2: %d, want %d", got, want[2])
	}
}
