package hop

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tally-dev/tally/store/delivery"
)

// fakePub is a Publisher whose every publish fails, is stored or is left hanging as the
// test decides; stored messages are recorded in the order the "server" stored them.
type fakePub struct {
	decide  func(msg *nats.Msg) (syncErr, asyncErr error, hang bool)
	stored  []string // message ids, in storing order
	pending []*fakeFut
	streams map[string]bool // subjects with a stream; nil: every subject
}

type fakeFut struct {
	msg *nats.Msg
	ok  chan *jetstream.PubAck
	err chan error
}

func (f *fakeFut) Ok() <-chan *jetstream.PubAck { return f.ok }
func (f *fakeFut) Err() <-chan error            { return f.err }
func (f *fakeFut) Msg() *nats.Msg               { return f.msg }

func (p *fakePub) PublishMsgAsync(msg *nats.Msg, _ ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	syncErr, asyncErr, hang := p.decide(msg)
	if syncErr != nil {
		return nil, syncErr
	}
	f := &fakeFut{msg: msg, ok: make(chan *jetstream.PubAck, 1), err: make(chan error, 1)}
	switch {
	case hang:
		p.pending = append(p.pending, f)
	case asyncErr != nil:
		f.err <- asyncErr
	default:
		p.store(f)
	}
	return f, nil
}

func (p *fakePub) store(f *fakeFut) {
	p.stored = append(p.stored, f.msg.Header.Get(jetstream.MsgIDHeader))
	f.ok <- &jetstream.PubAck{}
}

// release stores every hanging publish in a random order, as acks of a retried
// publish overtake each other.
func (p *fakePub) release(r *rand.Rand) {
	r.Shuffle(len(p.pending), func(i, j int) { p.pending[i], p.pending[j] = p.pending[j], p.pending[i] })
	for _, f := range p.pending {
		p.store(f)
	}
	p.pending = nil
}

func (p *fakePub) StreamNameBySubject(_ context.Context, subject string) (string, error) {
	if p.streams == nil || p.streams[subject] {
		return "S", nil
	}
	return "", jetstream.ErrStreamNotFound
}

func entries(from, n int, subject string) []delivery.OutboxEntry {
	var out []delivery.OutboxEntry
	for i := from; i < from+n; i++ {
		out = append(out, delivery.OutboxEntry{Seq: uint64(i), Subject: subject, MsgID: fmt.Sprint("m", i), Data: []byte{byte(i)}})
	}
	return out
}

// Whatever fails, hangs or is acknowledged out of order, every entry is stored at least
// once and reported as published exactly once.
func TestOutboxStoresEverything(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 50 {
		p := &fakePub{}
		p.decide = func(*nats.Msg) (error, error, bool) {
			switch r.IntN(4) {
			case 0:
				return errors.New("connection closed"), nil, false
			case 1:
				return nil, errors.New("timeout"), false
			case 2:
				return nil, nil, true
			}
			return nil, nil, false
		}
		// A publish left hanging fails after AckTimeout and is sent again; the hanging
		// one may still be stored later (released below, out of order).
		o := NewOutbox(p, OutboxOptions{MaxInflight: 1 + r.IntN(8), AckTimeout: time.Millisecond, Backoff: time.Microsecond, MaxBackoff: time.Millisecond})
		ctx := t.Context()
		n := 1 + r.IntN(100)
		for sent := 0; sent < n; {
			k := min(n-sent, 1+r.IntN(10))
			if err := o.Send(ctx, entries(sent, k, "s")); err != nil {
				t.Fatal(err)
			}
			if r.IntN(3) == 0 {
				p.release(r)
			}
			sent += k
		}
		p.decide = func(*nats.Msg) (error, error, bool) { return nil, nil, false }
		p.release(r)
		if err := o.Reap(ctx, true); err != nil {
			t.Fatal(err)
		}
		got := map[uint64]int{}
		for _, s := range o.Published() {
			got[s]++
		}
		stored := map[string]bool{}
		for _, id := range p.stored {
			stored[id] = true
		}
		for i := range n {
			if got[uint64(i)] != 1 || !stored[fmt.Sprint("m", i)] {
				t.Fatalf("round %d: entry %d reported %d times, stored %v", round, i, got[uint64(i)], stored[fmt.Sprint("m", i)])
			}
		}
		if o.Len() != 0 {
			t.Fatalf("round %d: %d entries left", round, o.Len())
		}
	}
}

// Send waits while MaxInflight publishes are unacknowledged instead of failing.
func TestOutboxWaitsUnderBackPressure(t *testing.T) {
	p := &fakePub{decide: func(*nats.Msg) (error, error, bool) { return nil, nil, true }}
	o := NewOutbox(p, OutboxOptions{MaxInflight: 3})
	if err := o.Send(t.Context(), entries(0, 3, "s")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := o.Send(ctx, entries(3, 1, "s")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a fourth entry with three unacknowledged: %v, want to wait", err)
	}
	p.release(rand.New(rand.NewPCG(1, 1)))
	if err := o.Send(t.Context(), entries(3, 1, "s")); err != nil {
		t.Fatal(err)
	}
	if o.Len() > 3 {
		t.Fatalf("%d in flight, at most 3", o.Len())
	}
}

// ReapUntil settles what it can and returns once woken, keeping what is unacknowledged,
// and reports every entry stored when they are, woken or not; Reap, woken by nothing,
// waits as before.
func TestOutboxReapUntil(t *testing.T) {
	p := &fakePub{decide: func(*nats.Msg) (error, error, bool) { return nil, nil, true }}
	o := NewOutbox(p, OutboxOptions{})
	if err := o.Send(t.Context(), entries(0, 3, "s")); err != nil {
		t.Fatal(err)
	}
	p.store(p.pending[0]) // the oldest acknowledged, the others hanging
	p.pending = p.pending[1:]
	wake := make(chan struct{}, 1)
	wake <- struct{}{}
	if settled, err := o.ReapUntil(t.Context(), wake); settled || err != nil {
		t.Fatalf("woken with two entries hanging: settled %v, %v", settled, err)
	}
	if o.Len() != 2 || !slices.Equal(o.Published(), []uint64{0}) {
		t.Fatalf("%d in flight, published %v; want 2 and the first", o.Len(), o.Published())
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, err := o.ReapUntil(ctx, make(chan struct{})); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("neither woken nor acknowledged: %v, want to wait", err)
	}
	p.release(rand.New(rand.NewPCG(1, 1)))
	wake <- struct{}{} // stored by now: reported so, woken or not
	if settled, err := o.ReapUntil(t.Context(), wake); !settled || err != nil || o.Len() != 0 {
		t.Fatalf("every entry acknowledged: settled %v, %v, %d in flight", settled, err, o.Len())
	}
}

// An entry that can never be stored — no stream for its subject, too large — is
// replaced by what Permanent returns, under its own Seq; a stream that is away is not
// permanent.
func TestOutboxPermanentErrors(t *testing.T) {
	away := true
	p := &fakePub{streams: map[string]bool{"ok": true, "big": true}}
	p.decide = func(m *nats.Msg) (error, error, bool) {
		switch {
		case m.Subject == "big":
			return nats.ErrMaxPayload, nil, false
		case m.Subject == "nostream":
			return nil, jetstream.ErrNoStreamResponse, false
		case m.Subject == "ok" && away:
			away = false
			return nil, jetstream.ErrNoStreamResponse, false
		}
		return nil, nil, false
	}
	var reasons []error
	o := NewOutbox(p, OutboxOptions{Permanent: func(e delivery.OutboxEntry, err error) []delivery.OutboxEntry {
		reasons = append(reasons, err)
		return []delivery.OutboxEntry{{Subject: "dlq", MsgID: "dlq." + e.MsgID}}
	}})
	es := append(append(entries(0, 1, "big"), entries(1, 1, "nostream")...), entries(2, 1, "ok")...)
	if err := o.Send(t.Context(), es); err != nil {
		t.Fatal(err)
	}
	if err := o.Reap(t.Context(), true); err != nil {
		t.Fatal(err)
	}
	want := []string{"dlq.m0", "dlq.m1", "m2"}
	if fmt.Sprint(p.stored) != fmt.Sprint(want) {
		t.Fatalf("stored %v, want %v", p.stored, want)
	}
	if len(reasons) != 2 || !errors.Is(reasons[0], nats.ErrMaxPayload) || !errors.Is(reasons[1], jetstream.ErrNoStreamResponse) {
		t.Fatalf("reasons %v", reasons)
	}
	if got := fmt.Sprint(o.Published()); got != "[0 1 2]" {
		t.Fatalf("published %s", got)
	}
}

// An entry that fails at once for good and that Permanent drops is reported published
// once and not sent again (it was sent again and again, and reported each time).
func TestOutboxDropsAtOnce(t *testing.T) {
	calls := 0
	p := &fakePub{}
	p.decide = func(m *nats.Msg) (error, error, bool) {
		if calls++; calls > 10 {
			t.Fatalf("%d publishes of 2 entries", calls)
		}
		if m.Subject == "big" {
			return nats.ErrMaxPayload, nil, false
		}
		return nil, nil, false
	}
	o := NewOutbox(p, OutboxOptions{Permanent: func(delivery.OutboxEntry, error) []delivery.OutboxEntry { return nil }})
	if err := o.Send(t.Context(), append(entries(1, 1, "big"), entries(2, 1, "ok")...)); err != nil {
		t.Fatal(err)
	}
	if err := o.Reap(t.Context(), true); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(o.Published()); got != "[1 2]" || calls != 2 || o.Len() != 0 {
		t.Fatalf("published %s after %d publishes, %d left; want [1 2] after 2", got, calls, o.Len())
	}
}

// An entry that can never be stored is replaced by several entries — a dead letter and
// an empty batch under its number — sent in order; the entry is retired once the last is
// stored. A replacement that can never be stored either is dropped, not replaced again.
func TestOutboxReplacements(t *testing.T) {
	p := &fakePub{streams: map[string]bool{"d": true, "dlq": true}}
	p.decide = func(m *nats.Msg) (error, error, bool) {
		switch {
		case m.Subject == "d" && len(m.Data) > 1 && m.Header.Get(jetstream.MsgIDHeader) == "m1":
			return nats.ErrMaxPayload, nil, false // too large for the client
		case m.Subject == "d" && len(m.Data) > 1:
			return nil, &jetstream.APIError{ErrorCode: jetstream.JSErrCodeStreamMessageExceedsMaximum}, false // for the stream
		case m.Subject == "nostream":
			return nil, jetstream.ErrNoStreamResponse, false
		}
		return nil, nil, false
	}
	calls := 0
	o := NewOutbox(p, OutboxOptions{Permanent: func(e delivery.OutboxEntry, err error) []delivery.OutboxEntry {
		calls++
		dlq := "dlq"
		if e.MsgID == "m3" {
			dlq = "nostream"
		}
		return []delivery.OutboxEntry{
			{Subject: dlq, MsgID: "dlq." + e.MsgID},
			{Subject: e.Subject, MsgID: e.MsgID, Data: []byte{0}}, // fills the number
		}
	}})
	es := entries(0, 4, "d")
	for i := 1; i < 4; i++ {
		es[i].Data = []byte("too large")
	}
	if err := o.Send(t.Context(), es); err != nil {
		t.Fatal(err)
	}
	if err := o.Reap(t.Context(), true); err != nil {
		t.Fatal(err)
	}
	want := []string{"m0", "dlq.m1", "m1", "dlq.m2", "m2", "m3"}
	if fmt.Sprint(p.stored) != fmt.Sprint(want) || calls != 3 {
		t.Fatalf("stored %v with %d calls of Permanent, want %v with 3", p.stored, calls, want)
	}
	published := o.Published()
	slices.Sort(published)
	if got := fmt.Sprint(published); got != "[0 1 2 3]" || o.Len() != 0 {
		t.Fatalf("published %s, %d left; want each entry once", got, o.Len())
	}
}
