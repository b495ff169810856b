package hoptest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/stages/hop"
)

// Faults says which faults a FaultyPublisher injects: each rate is the probability that
// one publish gets that fault (at most one fault per publish).
type Faults struct {
	// Fail: the publish fails — an error at once, a future that fails without sending,
	// or (the nastiest) a message that is stored but whose ack is reported as failed,
	// so the sender sends it again: a third each.
	Fail float64
	// Delay: the message is sent, and its ack is delivered up to MaxDelay late.
	Delay float64
	// Reorder: the message is held and sent after the next one, or after MaxDelay when
	// none comes.
	Reorder float64
	// Lose: the message is dropped silently — never sent, its future never settles (no
	// error, no ack) — as a publish lost in a server restart the client did not see.
	// Only the sender's AckTimeout finds it.
	Lose float64
	// Seed makes the faults repeatable for the same sequence of publishes.
	Seed uint64
	// MaxDelay bounds a delay and how long a message is held (200 ms when 0).
	MaxDelay time.Duration
	// AckTimeout is how long an Outbox publishing through the FaultyPublisher waits for
	// an acknowledgement before it sends again (see FaultyPublisher.AckTimeout): short,
	// so that a test finds lost publishes in time. 0: DefaultLostAckTimeout when Lose is
	// set, else the Outbox's own default.
	AckTimeout time.Duration
}

// DefaultLostAckTimeout is the AckTimeout of an Outbox publishing through a
// FaultyPublisher that loses publishes, unless Faults.AckTimeout says otherwise: well
// above the delays it injects (MaxDelay), well below the 10 s a production Outbox waits.
const DefaultLostAckTimeout = time.Second

// ParseFaults reads a specification such as
// "fail=0.05,delay=0.05,reorder=0.05,lose=0.01,seed=7" (and optionally maxdelay=200ms,
// acktimeout=1s). Every key is optional; an empty string injects nothing.
func ParseFaults(s string) (Faults, error) {
	var f Faults
	for kv := range strings.SplitSeq(s, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return f, fmt.Errorf("%w: %q is not key=value", ErrBadFaults, kv)
		}
		var err error
		switch k {
		case "fail":
			f.Fail, err = parseRate(v)
		case "delay":
			f.Delay, err = parseRate(v)
		case "reorder":
			f.Reorder, err = parseRate(v)
		case "lose":
			f.Lose, err = parseRate(v)
		case "seed":
			f.Seed, err = strconv.ParseUint(v, 10, 64)
		case "maxdelay":
			f.MaxDelay, err = parseDuration(v)
		case "acktimeout":
			f.AckTimeout, err = parseDuration(v)
		default:
			return f, fmt.Errorf("%w: unknown key %q (fail, delay, reorder, lose, seed, maxdelay, acktimeout)", ErrBadFaults, k)
		}
		if err != nil {
			return f, fmt.Errorf("%w: %s=%q: %w", ErrBadFaults, k, v, err)
		}
	}
	if f.Fail+f.Delay+f.Reorder+f.Lose > 1 {
		return f, fmt.Errorf("%w: rates add up to more than 1", ErrBadFaults)
	}
	return f, nil
}

func parseDuration(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err == nil && d < 0 {
		err = errors.New("negative")
	}
	return d, err
}

func parseRate(v string) (float64, error) {
	r, err := strconv.ParseFloat(v, 64)
	if err == nil && (r < 0 || r > 1) {
		err = errors.New("not in 0..1")
	}
	return r, err
}

// String is the specification ParseFaults reads back.
func (f Faults) String() string {
	s := fmt.Sprintf("fail=%g,delay=%g,reorder=%g,seed=%d", f.Fail, f.Delay, f.Reorder, f.Seed)
	if f.Lose > 0 {
		s += fmt.Sprintf(",lose=%g", f.Lose)
	}
	if f.MaxDelay > 0 {
		s += ",maxdelay=" + f.MaxDelay.String()
	}
	if f.AckTimeout > 0 {
		s += ",acktimeout=" + f.AckTimeout.String()
	}
	return s
}

// FaultStats counts the faults injected; safe to read from any goroutine.
type FaultStats struct {
	Publishes atomic.Int64 // calls of PublishMsgAsync
	Failed    atomic.Int64 // publishes made to fail
	AckLost   atomic.Int64 // of those, stored but reported failed
	Delayed   atomic.Int64 // acks delivered late
	Reordered atomic.Int64 // messages held and sent after later ones
	Lost      atomic.Int64 // messages dropped silently, their futures never settled
}

// FaultyPublisher wraps a Publisher and, from a seeded random source, fails publishes,
// delays acks, reorders messages and loses them silently: what a flaky network, a NATS
// restart or a lost ack does to a sender, on demand: what the chaos run wraps every
// outbox's Publisher in (node.Config.WrapPublisher). It is safe for concurrent use.
type FaultyPublisher struct {
	inner hop.Publisher
	f     Faults
	Stats FaultStats

	mu     sync.Mutex
	rng    *rand.Rand
	held   []*heldMsg
	timer  *time.Timer // releases held messages when no later one comes
	closed chan struct{}
	once   sync.Once
}

type heldMsg struct {
	msg  *nats.Msg
	opts []jetstream.PublishOpt
	fut  *future
}

// Wrap returns what node.Config.WrapPublisher takes: a FaultyPublisher with f around
// every stage's and worker's Publisher, its seed salted apart for each so that each
// gets faults of its own.
func Wrap(f Faults) func(p hop.Publisher, salt uint64) hop.Publisher {
	return func(p hop.Publisher, salt uint64) hop.Publisher {
		g := f
		g.Seed = g.Seed*1_000_003 + salt
		return NewFaultyPublisher(p, g)
	}
}

// NewFaultyPublisher returns p with f injected.
func NewFaultyPublisher(p hop.Publisher, f Faults) *FaultyPublisher {
	if f.MaxDelay <= 0 {
		f.MaxDelay = 200 * time.Millisecond
	}
	return &FaultyPublisher{inner: p, f: f, rng: rand.New(rand.NewPCG(f.Seed, 0x7a11)), closed: make(chan struct{})}
}

// Faults returns what f injects.
func (f *FaultyPublisher) Faults() Faults { return f.f }

// PublishMsgAsync publishes msg through the wrapped Publisher, or injects a fault.
func (f *FaultyPublisher) PublishMsgAsync(msg *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	f.Stats.Publishes.Add(1)
	f.mu.Lock()
	roll, pick, delay := f.rng.Float64(), f.rng.IntN(3), time.Duration(f.rng.Int64N(int64(f.f.MaxDelay)+1))
	switch {
	case roll < f.f.Fail:
		f.Stats.Failed.Add(1)
		switch pick {
		case 0:
			f.mu.Unlock()
			return nil, fmt.Errorf("publish to %s: %w", msg.Subject, ErrInjected)
		case 1:
			f.mu.Unlock()
			fut := newFuture(msg)
			fut.fail(fmt.Errorf("ack of %s: %w", msg.Subject, ErrInjected))
			return fut, nil
		}
		f.Stats.AckLost.Add(1)
		real, err := f.sendLocked(msg, opts)
		f.mu.Unlock()
		if err != nil {
			return nil, err
		}
		fut := newFuture(msg)
		go f.forward(real, fut, 0, true)
		return fut, nil
	case roll < f.f.Fail+f.f.Reorder:
		f.Stats.Reordered.Add(1)
		fut := newFuture(msg)
		f.held = append(f.held, &heldMsg{msg: msg, opts: opts, fut: fut})
		if f.timer == nil {
			f.timer = time.AfterFunc(f.f.MaxDelay, f.release)
		}
		f.mu.Unlock()
		return fut, nil
	case roll < f.f.Fail+f.f.Reorder+f.f.Delay:
		f.Stats.Delayed.Add(1)
		real, err := f.sendLocked(msg, opts)
		f.mu.Unlock()
		if err != nil {
			return nil, err
		}
		fut := newFuture(msg)
		go f.forward(real, fut, delay, false)
		return fut, nil
	case roll < f.f.Fail+f.f.Reorder+f.f.Delay+f.f.Lose:
		f.Stats.Lost.Add(1)
		f.mu.Unlock()
		return newFuture(msg), nil
	}
	real, err := f.sendLocked(msg, opts)
	f.mu.Unlock()
	return real, err
}

// sendLocked publishes msg and then every held message, which thus goes after it.
func (f *FaultyPublisher) sendLocked(msg *nats.Msg, opts []jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	real, err := f.inner.PublishMsgAsync(msg, opts...)
	f.releaseLocked()
	return real, err
}

// release sends the held messages when no later publish came within MaxDelay.
func (f *FaultyPublisher) release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.releaseLocked()
}

func (f *FaultyPublisher) releaseLocked() {
	if f.timer != nil {
		f.timer.Stop()
		f.timer = nil
	}
	held := f.held
	f.held = nil
	for _, h := range held {
		real, err := f.inner.PublishMsgAsync(h.msg, h.opts...)
		if err != nil {
			h.fut.fail(err)
			continue
		}
		go f.forward(real, h.fut, 0, false)
	}
}

// forward settles fut as real settles, after delay; with lose, a stored message is
// reported as failed.
func (f *FaultyPublisher) forward(real jetstream.PubAckFuture, fut *future, delay time.Duration, lose bool) {
	var ack *jetstream.PubAck
	var err error
	select {
	case ack = <-real.Ok():
	case err = <-real.Err():
	case <-f.closed:
		return
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-f.closed:
			t.Stop()
			return
		}
	}
	switch {
	case err != nil:
		fut.fail(err)
	case lose:
		fut.fail(fmt.Errorf("ack of %s lost: %w", fut.msg.Subject, ErrInjected))
	default:
		fut.ok <- ack
	}
}

// AckTimeout is how long an Outbox publishing through f waits for an acknowledgement
// before it sends again, unless its options say otherwise: Faults.AckTimeout, or
// DefaultLostAckTimeout when f loses publishes (0: the Outbox's own default).
func (f *FaultyPublisher) AckTimeout() time.Duration {
	if f.f.AckTimeout == 0 && f.f.Lose > 0 {
		return DefaultLostAckTimeout
	}
	return f.f.AckTimeout
}

// StreamNameBySubject asks the wrapped Publisher when it is a StreamFinder, so that an
// Outbox still tells permanent failures from transient ones.
func (f *FaultyPublisher) StreamNameBySubject(ctx context.Context, subject string) (string, error) {
	if sf, ok := f.inner.(hop.StreamFinder); ok {
		return sf.StreamNameBySubject(ctx, subject)
	}
	return "", errNoFinder
}

// Close sends what is still held and stops waiting for acks: futures not settled yet
// never will be.
func (f *FaultyPublisher) Close() {
	f.release()
	f.once.Do(func() { close(f.closed) })
}

// future is a jetstream.PubAckFuture settled by the FaultyPublisher.
type future struct {
	msg *nats.Msg
	ok  chan *jetstream.PubAck
	err chan error
}

func newFuture(msg *nats.Msg) *future {
	return &future{msg: msg, ok: make(chan *jetstream.PubAck, 1), err: make(chan error, 1)}
}

func (u *future) fail(err error)               { u.err <- err }
func (u *future) Ok() <-chan *jetstream.PubAck { return u.ok }
func (u *future) Err() <-chan error            { return u.err }
func (u *future) Msg() *nats.Msg               { return u.msg }

// Hold publishes through Publisher but loses the Nth publish to Subject (1: the first):
// never sent, its future never settled, as a publish lost without an error. An Outbox
// publishing through it waits an hour before it sends that one again (AckTimeout).
type Hold struct {
	hop.Publisher
	Subject string
	Nth     int32
	// Pause, when set, is how long the lost publish takes to return: a stage publishing
	// on its own goroutine has its reader's next messages ready by then, so it is not
	// idle after that transaction (an idle stage waits for its outbox to be stored).
	Pause time.Duration
	n     atomic.Int32
	held  atomic.Pointer[nats.Msg]
}

func (h *Hold) PublishMsgAsync(msg *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	if msg.Subject == h.Subject && h.n.Add(1) == h.Nth {
		h.held.Store(msg)
		time.Sleep(h.Pause)
		return newFuture(msg), nil
	}
	return h.Publisher.PublishMsgAsync(msg, opts...)
}

// AckTimeout keeps an Outbox from sending the lost message again itself.
func (h *Hold) AckTimeout() time.Duration { return time.Hour }

// Held is the message lost, nil before it.
func (h *Hold) Held() *nats.Msg { return h.held.Load() }
