package counter_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/buildinfo"
	"github.com/tally-dev/tally/pipeline/natstest"
	"github.com/tally-dev/tally/stages/counter"
)

// TestQueriesAnsweredDuringCheckpoint: while a checkpoint waits (for Badger, behind
// every other partition's commits, or stalled while it compacts a backlog), the
// partition still answers its readers, with what it has applied. Before, a query waited
// in the worker's loop until the checkpoint was done, and a get under load timed out.
func TestQueriesAnsweredDuringCheckpoint(t *testing.T) {
	r := newRig(t)
	cfg := r.config()
	inside, release := make(chan struct{}), make(chan struct{})
	first := true
	cfg.AfterCheckpoint = func() error { // called while the checkpoint is being taken
		if first {
			first = false
			close(inside)
			<-release
		}
		return nil
	}
	w, _ := r.start(cfg)
	const x = 42
	r.publish(1, 1, x, 3)
	<-inside
	defer close(release)
	// The checkpoint does not end until the query has answered: a worker that answers
	// only between checkpoints never does.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := [][]uint64{make([]uint64, len(r.fam.Fields))}
	if err := w.Get(ctx, []uint64{x}, out); err != nil {
		t.Fatalf("a query during a checkpoint: %v", err)
	}
	if out[0][0] != 3 {
		t.Fatalf("likes of %d: %d, want 3", x, out[0][0])
	}
}

// unacked publishes nothing and never acknowledges: change events in flight for good.
type unacked struct{}

func (unacked) PublishMsgAsync(msg *nats.Msg, _ ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	return unackedFuture{msg}, nil
}

type unackedFuture struct{ msg *nats.Msg }

func (f unackedFuture) Ok() <-chan *jetstream.PubAck { return nil }
func (f unackedFuture) Err() <-chan error            { return nil }
func (f unackedFuture) Msg() *nats.Msg               { return f.msg }

// A stopping worker answers its readers until Run returns — its last flush, the wait
// for its change events' acknowledgements (up to 2 s) and its snapshot — and a stopped
// one answers ErrStopped at once, which readers take as a hand-over (pipeline.
// ErrUnavailable) and ask the partition's next owner. Before, a read during the wait
// was answered only as it ended, and one after it waited for its context's end: the
// giver of a partition held readers up for as long as its stop took.
func TestQueriesAnsweredWhileStopping(t *testing.T) {
	r := newRig(t)
	cfg := r.config()
	cfg.Publisher = unacked{}
	w := counter.New(cfg, r.js, r.db, slog.New(slog.DiscardHandler), r.stats)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	stopped := make(chan error, 1)
	go func() { stopped <- w.Run(ctx) }()
	const x = 42
	r.publish(1, 1, x, 3)
	if got := r.likes(w, x); got != 3 {
		t.Fatalf("likes of %d: %d, want 3", x, got)
	}
	r.checkpointedAt(r.db, r.last) // its change events sent, never acknowledged
	begun := time.Now()
	stop()
	get := func(wait time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		out := [][]uint64{make([]uint64, len(r.fam.Fields))}
		if err := w.Get(ctx, []uint64{x}, out); err != nil {
			return err
		}
		if out[0][0] != 3 {
			return fmt.Errorf("likes of %d: %d, want 3", x, out[0][0])
		}
		return nil
	}
	answered := 0
	for done := false; !done; {
		select {
		case err := <-stopped:
			if err != nil {
				t.Fatalf("stop: %v", err)
			}
			done = true
		default:
			err := get(500 * time.Millisecond)
			if errors.Is(err, counter.ErrStopped) {
				// Stopped between the select and the read: Run is returning.
				select {
				case err := <-stopped:
					if err != nil {
						t.Fatalf("stop: %v", err)
					}
					done = true
					continue
				case <-time.After(time.Second):
				}
			}
			if err != nil {
				t.Fatalf("a read %v into the stop: %v", time.Since(begun).Round(time.Millisecond), err)
			}
			answered++
			time.Sleep(10 * time.Millisecond)
		}
	}
	if took := time.Since(begun); took < time.Second || answered < 10 {
		t.Fatalf("the stop took %v and %d reads were answered in it; want it to wait for the acknowledgements", took, answered)
	}
	err := get(5 * time.Second)
	if !errors.Is(err, counter.ErrStopped) || !errors.Is(err, pipeline.ErrUnavailable) {
		t.Fatalf("a read of a stopped worker: %v, want ErrStopped (unavailable)", err)
	}
}

// TestQueriesQueued: a request hands each of its partitions its ids without waiting
// (Send), then waits for them all, with no goroutine each. A query queued when its
// worker stops is never taken: its wait answers ErrStopped at once, as a read of a
// stopped worker does — and so does a standby's read (Stale), which before waited for
// its context's end on a worker that had stopped.
func TestQueriesQueued(t *testing.T) {
	r := newRig(t)
	const x = 42
	r.publish(1, 1, x, 3)
	get := func(w *counter.Worker) (func() error, [][]uint64) {
		out := [][]uint64{make([]uint64, len(r.fam.Fields))}
		return w.Send(t.Context(), []uint64{x}, out), out
	}

	// Sent before the worker runs: they wait in its queue, and are answered once it does.
	w := counter.New(r.config(), r.js, r.db, slog.New(slog.DiscardHandler), r.stats)
	var waits []func() error
	for range 8 {
		wait, _ := get(w)
		waits = append(waits, wait)
	}
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	for i, wait := range waits {
		if err := wait(); err != nil {
			t.Fatalf("query %d, queued before Run: %v", i, err)
		}
	}
	if got := r.likes(w, x); got != 3 {
		t.Fatalf("likes of %d: %d, want 3", x, got)
	}
	wait, out := get(w)
	if err := wait(); err != nil || out[0][0] != 3 {
		t.Fatalf("a query sent to a running worker: %v, %v; want 3", err, out)
	}
	// Once answered and waited for, a get's query, with its channel and its wait, is
	// reused: a get of an id in the table allocates nothing of its own (it made three).
	// The race detector's pool drops a quarter of what is put back: not measured then.
	if !buildinfo.Race {
		ids, ctx := []uint64{x}, t.Context()
		if n := testing.AllocsPerRun(200, func() {
			if err := w.Send(ctx, ids, out)(); err != nil {
				t.Fatal(err)
			}
		}); n > 0.5 {
			t.Errorf("a get of one id in the table: %.1f allocations, want none", n)
		}
	}
	stop()
	if err := <-ran; err != nil {
		t.Fatalf("stop: %v", err)
	}

	// Queued, and the worker stops without taking them.
	w = counter.New(r.config(), r.js, r.db, slog.New(slog.DiscardHandler), r.stats)
	waits = waits[:0]
	for range 8 {
		wait, _ := get(w)
		waits = append(waits, wait)
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	_ = w.Run(cancelled) // its error is the cancelled context's, or none
	for i, wait := range waits {
		if err := wait(); !errors.Is(err, counter.ErrStopped) || !errors.Is(err, pipeline.ErrUnavailable) {
			t.Fatalf("query %d, queued as its worker stopped: %v, want ErrStopped (unavailable)", i, err)
		}
	}
	long, cancelLong := context.WithTimeout(context.Background(), time.Minute)
	defer cancelLong()
	_, err := w.Stale(long, []uint64{x}, [][]uint64{make([]uint64, len(r.fam.Fields))})
	if !errors.Is(err, counter.ErrStopped) {
		t.Fatalf("a standby's read of a stopped worker: %v, want ErrStopped", err)
	}
}

// stallingJS is a JetStream context whose lookups of the changes stream wait until
// released (or until their context ends), as NATS leaves a JetStream request unanswered
// while a server of its cluster goes: entered is closed at the first.
type stallingJS struct {
	jetstream.JetStream
	changes           string
	entered, released chan struct{}
	once              sync.Once
	returned          atomic.Bool
	on                atomic.Bool // stalls only while set
}

func (s *stallingJS) Stream(ctx context.Context, name string) (jetstream.Stream, error) {
	if name == s.changes {
		if err := s.stall(ctx); err != nil {
			return nil, err
		}
	}
	return s.JetStream.Stream(ctx, name)
}

// StreamNameBySubject stalls too: what hop.PermanentFailure asks.
func (s *stallingJS) StreamNameBySubject(ctx context.Context, subject string) (string, error) {
	if err := s.stall(ctx); err != nil {
		return "", err
	}
	return s.JetStream.StreamNameBySubject(ctx, subject)
}

func (s *stallingJS) stall(ctx context.Context) error {
	if !s.on.Load() {
		return nil
	}
	s.once.Do(func() { close(s.entered) })
	defer s.returned.Store(true)
	select {
	case <-s.released:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestQueriesAnsweredWhileLookingUpChanges: a worker that asks the changes stream for
// its subject's last change event (before its first change event, after a fence) still
// answers its readers while NATS has not answered. Before, it asked on its own goroutine
// for up to a second: during a NATS server loss every partition's reads waited that
// second (TestReadsThroughNATSServerLoss failed a get given 1 s in 4 runs of 18).
func TestQueriesAnsweredWhileLookingUpChanges(t *testing.T) {
	r := newRig(t)
	js := &stallingJS{JetStream: r.js, changes: r.sc.Subjects.ChangesStream(), entered: make(chan struct{}), released: make(chan struct{})}
	js.on.Store(true)
	w := counter.New(r.config(), js, r.db, slog.New(slog.DiscardHandler), r.stats)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() { _ = w.Run(ctx) }()
	const x = 42
	r.publish(1, 1, x, 3) // checkpointed: its change event is the first, looked up first
	select {
	case <-js.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the worker never looked its last change event up")
	}
	defer close(js.released)
	if got := r.likes(w, x); got != 3 {
		t.Fatalf("likes of %d: %d, want 3", x, got)
	}
	if js.returned.Load() {
		t.Fatal("the read was answered only once the lookup had given up")
	}
}

// TestQueriesAnsweredWhileChangesStreamAway: a change event answered "no responders" —
// its stream electing a leader, or gone — is looked into off the worker's goroutine,
// which answers its readers meanwhile; with the stream gone, what is pending is dropped
// and counting goes on. Before, the worker asked which (hop.PermanentFailure) on its
// own goroutine, for up to 2 s.
func TestQueriesAnsweredWhileChangesStreamAway(t *testing.T) {
	r := newRig(t)
	js := &stallingJS{JetStream: r.js, changes: r.sc.Subjects.ChangesStream(), entered: make(chan struct{}), released: make(chan struct{})}
	w := counter.New(r.config(), js, r.db, slog.New(slog.DiscardHandler), r.stats)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() { _ = w.Run(ctx) }()
	const x = 42
	r.publish(1, 1, x, 3)
	if got := r.likes(w, x); got != 3 {
		t.Fatalf("likes of %d: %d, want 3", x, got)
	}
	r.checkpointedAt(r.db, r.last) // its change event stored
	natstest.Eventually(t, 10*time.Second, "the first change event stored", func() (bool, string) {
		st, err := r.js.Stream(context.Background(), r.sc.Subjects.ChangesStream())
		if err != nil {
			return false, err.Error()
		}
		info, err := st.Info(context.Background())
		return err == nil && info.State.Msgs == 1, fmt.Sprint(err)
	})
	if err := r.js.DeleteStream(context.Background(), r.sc.Subjects.ChangesStream()); err != nil {
		t.Fatal(err)
	}
	js.on.Store(true)
	r.publish(1, 2, x, 2) // its change event: no responders
	select {
	case <-js.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the worker never looked into its change event's refusal")
	}
	if got := r.likes(w, x); got != 5 {
		t.Fatalf("likes of %d: %d, want 5", x, got)
	}
	if js.returned.Load() {
		t.Fatal("the read was answered only once NATS was done with")
	}
	close(js.released)
	natstest.Eventually(t, 10*time.Second, "the change event with no stream dropped", func() (bool, string) {
		return r.stats.ChangeErrs.Load() > 0, fmt.Sprint(r.stats.ChangeErrs.Load(), " change errors")
	})
	if got := r.likes(w, x); got != 5 {
		t.Fatalf("likes of %d after: %d, want 5", x, got)
	}
}

// TestQueryAnsweredBetweenDeltaMessages: a query that comes while a partition applies a
// batch of delta messages is answered after the message being applied, with what the
// partition has applied so far, not after the rest of the batch (up to 1 024 messages,
// a get's wait under load). A checkpoint after every message (MaxDirty 1) calls OnFlush
// between them, where the query is sent. Before, it was answered once the batch was done.
func TestQueryAnsweredBetweenDeltaMessages(t *testing.T) {
	r := newRig(t)
	const x, n, at = 42, 300, 20
	for i := range n {
		r.publish(1, uint64(i+1), x, 1)
	}
	cfg := r.config()
	cfg.FlushInterval, cfg.MaxDirty = time.Hour, 1
	var w *counter.Worker
	var flushes atomic.Int64
	waits := make(chan func() error, 1)
	out := [][]uint64{make([]uint64, len(r.fam.Fields))}
	cfg.OnFlush = func(changed int, _ time.Duration) {
		if changed == 0 {
			return
		}
		if flushes.Add(1) == at {
			waits <- w.Send(context.Background(), []uint64{x}, out)
		}
	}
	w = counter.New(cfg, r.js, r.db, slog.New(slog.DiscardHandler), r.stats)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() { _ = w.Run(ctx) }()
	var wait func() error
	select {
	case wait = <-waits:
	case <-time.After(30 * time.Second):
		t.Fatalf("%d messages applied in 30 s, want %d", flushes.Load(), at)
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	if out[0][0] != at {
		t.Fatalf("a query sent after message %d was answered with %d likes: want %d, what was applied when it came", at, out[0][0], at)
	}
	if got := r.likes(w, x); got != n {
		t.Fatalf("likes of %d: %d, want %d", x, got, n)
	}
}
