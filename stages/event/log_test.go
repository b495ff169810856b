package event

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/natstest"
	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/graph"
	"github.com/tally-dev/tally/store/stagelog"
)

// logHarness runs event stages of partition 0 (of parts) on one real NATS server, each
// with its own Badger, as different owners would.
type logHarness struct {
	t     *testing.T
	js    jetstream.JetStream
	sj    pipeline.Subjects
	parts int
	tx    int
	opts  cold.Options // for the databases run opens (Dir is set there)
}

func newLogHarness(t *testing.T) *logHarness { return newHarness(t, 1) }

func newHarness(t *testing.T, parts int) *logHarness {
	nc := natstest.Connect(t, natstest.Start(t))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	sc := pipeline.DefaultStreamConfig()
	sc.Partitions = parts
	if err := pipeline.Setup(context.Background(), js, sc); err != nil {
		t.Fatal(err)
	}
	return &logHarness{t: t, js: js, sj: sc.Subjects, parts: parts}
}

// likes publishes n likes of post by users from uid on.
func (h *logHarness) likes(uid, post, n int) {
	for i := range n {
		h.tx++
		data, _ := pipeline.Marshal(&pipeline.Event{Type: pipeline.TypeLike, UID: pipeline.ID(uid + i), Post: pipeline.ID(post)}, false)
		msg := &nats.Msg{Subject: h.sj.Event(pipeline.TypeLike, pipeline.ID(uid+i)), Data: data,
			Header: nats.Header{jetstream.MsgIDHeader: []string{fmt.Sprint("tx", h.tx)}}}
		if _, err := h.js.PublishMsg(context.Background(), msg); err != nil {
			h.t.Fatal(err)
		}
	}
}

func (h *logHarness) msgs(stream string) uint64 {
	st, err := h.js.Stream(context.Background(), stream)
	if err != nil {
		h.t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		h.t.Fatal(err)
	}
	return info.State.Msgs
}

type runningStage struct {
	*Stage
	db     *cold.DB
	cancel context.CancelFunc
	done   chan error
}

// start runs a logging stage as owner on db (a new database when nil).
func (h *logHarness) start(owner string, db *cold.DB) *runningStage {
	return h.run(owner, db, (*Stage).Run)
}

// run runs a logging stage as owner on db (a new database when nil), its run being Run
// or Mirror.
func (h *logHarness) run(owner string, db *cold.DB, run func(*Stage, context.Context) error) *runningStage {
	t := h.t
	if db == nil {
		opts := h.opts
		opts.Dir = t.TempDir()
		var err error
		if db, err = cold.Open(opts); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
	}
	st, err := New(Config{Partition: 0, Partitions: h.parts, Subjects: h.sj, Families: pipeline.DefaultFamilies(), Log: true, Owner: owner},
		h.js, db, slog.New(slog.NewTextHandler(io.Discard, nil)), NewStats())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &runningStage{Stage: st, db: db, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- run(st, ctx) }()
	t.Cleanup(func() { r.stop() })
	return r
}

func (r *runningStage) stop() error {
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err
		return err
	case <-time.After(10 * time.Second):
		return errors.New("stage did not stop")
	}
}

// caughtUp waits until r has committed everything in its stream and published its outbox.
func (h *logHarness) caughtUp(r *runningStage) {
	natstest.Eventually(h.t, 10*time.Second, "stage caught up", func() (bool, string) {
		lag, err := r.Lag(context.Background())
		return err == nil && lag == 0, fmt.Sprintf("lag %d, err %v", lag, err)
	})
}

// reached waits until r has committed everything in its stream and published its
// outbox, hop batches held above a gap apart: Lag counts those (they are not applied).
func (h *logHarness) reached(r *runningStage) {
	natstest.Eventually(h.t, 10*time.Second, "stage at the end of its stream", func() (bool, string) {
		lag, err := r.Lag(context.Background())
		held := uint64(r.holding.Load())
		return err == nil && lag == held, fmt.Sprintf("lag %d, %d held, err %v", lag, held, err)
	})
}

func (h *logHarness) state(db *cold.DB) stagelog.State {
	st, _, err := stagelog.Load(db, 0)
	if err != nil {
		h.t.Fatal(err)
	}
	return st
}

// A new owner with an empty disk replays the log: it reaches the same position with the
// same relations, and what it sends again carries the same message ids, so the deltas
// stream holds no new message.
func TestLogReplay(t *testing.T) {
	h := newLogHarness(t)
	a := h.start("a.1", nil)
	h.likes(100, 7, 40)
	h.caughtUp(a)
	h.likes(200, 7, 40)
	h.caughtUp(a)
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	want := h.state(a.db)
	if want.Log == 0 || h.msgs(h.sj.LogStream()) < 2 {
		t.Fatalf("stage state %+v, %d log records: nothing was logged", want, h.msgs(h.sj.LogStream()))
	}
	deltas := h.msgs(h.sj.DeltasStream())

	b := h.start("b.1", nil)
	h.caughtUp(b)
	got := h.state(b.db)
	if got.Pos != want.Pos || got.Log != want.Log || fmt.Sprint(got.Seqs) != fmt.Sprint(want.Seqs) {
		t.Fatalf("replayed state %+v, want %+v", got, want)
	}
	liked, err := graph.Related(b.db, 0, graph.Like, 120, []uint64{7, 8})
	if err != nil || !liked[0] || liked[1] {
		t.Fatalf("replayed relations: liked %v, err %v", liked, err)
	}
	natstest.Eventually(t, 5*time.Second, "outbox settled", func() (bool, string) {
		return !b.busy.Load(), "busy"
	})
	if n := h.msgs(h.sj.DeltasStream()); n != deltas {
		t.Fatalf("deltas stream holds %d messages after the replay, %d before: a batch was sent under a new id", n, deltas)
	}
	// The new owner goes on from there.
	h.likes(300, 7, 5)
	h.caughtUp(b)
	if st := h.state(b.db); st.Log <= want.Log || st.Pos <= want.Pos {
		t.Fatalf("state %+v after more events, was %+v", st, want)
	}
}

// Two processes that both believe they own the partition: the first to log a
// transaction wins, and the other is fenced before it commits or publishes anything.
func TestLogFencesSecondOwner(t *testing.T) {
	h := newLogHarness(t)
	a := h.start("a.1", nil)
	h.likes(100, 7, 10)
	h.caughtUp(a)
	b := h.start("b.1", nil) // replays a's log, then waits like a
	h.caughtUp(b)
	before := h.state(a.db)
	deltas := h.msgs(h.sj.DeltasStream())

	h.likes(500, 9, 1)
	var fenced, winner *runningStage
	natstest.Eventually(t, 10*time.Second, "one owner fenced", func() (bool, string) {
		for _, r := range []*runningStage{a, b} {
			select {
			case err := <-r.done:
				r.done <- err
				if !errors.Is(err, ErrFenced) {
					t.Fatalf("stage stopped with %v, want ErrFenced", err)
				}
				fenced = r
			default:
			}
		}
		return fenced != nil, "neither stopped"
	})
	winner = a
	if fenced == a {
		winner = b
	}
	h.caughtUp(winner)
	if err := winner.stop(); err != nil {
		t.Fatal(err)
	}
	if st := h.state(fenced.db); st.Pos != before.Pos || st.Log != before.Log {
		t.Fatalf("fenced stage committed: state %+v, was %+v", st, before)
	}
	if st := h.state(winner.db); st.Log != before.Log+1 {
		t.Fatalf("winner's log sequence %d, want %d", st.Log, before.Log+1)
	}
	// The winner alone sent the outbox of its record.
	st, err := h.js.Stream(context.Background(), h.sj.LogStream())
	if err != nil {
		t.Fatal(err)
	}
	last, err := st.GetLastMsgForSubject(context.Background(), h.sj.Log(0))
	if err != nil {
		t.Fatal(err)
	}
	rec, err := stagelog.DecodeRecord(last.Data)
	if err != nil {
		t.Fatal(err)
	}
	if n := h.msgs(h.sj.DeltasStream()); len(rec.Outbox) == 0 || n != deltas+uint64(len(rec.Outbox)) {
		t.Fatalf("deltas stream grew by %d messages, the winner's record sends %d", n-deltas, len(rec.Outbox))
	}
}

// flakyJS fails its first fails stream lookups of stream as an unanswered request does.
type flakyJS struct {
	jetstream.JetStream
	stream string
	fails  atomic.Int32
}

func (f *flakyJS) Stream(ctx context.Context, name string) (jetstream.Stream, error) {
	if name == f.stream && f.fails.Add(-1) >= 0 {
		return nil, context.DeadlineExceeded
	}
	return f.JetStream.Stream(ctx, name)
}

// A new owner whose replay cannot read the log at first (NATS did not answer in time)
// tries again: it stopped the whole process, which an overloaded cluster turned into
// every tallyd of a 27 M-id failover benchmark exiting.
func TestReplayRidesOutLogTimeouts(t *testing.T) {
	h := newLogHarness(t)
	a := h.start("a.1", nil)
	h.likes(100, 7, 40)
	h.caughtUp(a)
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	want := h.state(a.db)
	flaky := &flakyJS{JetStream: h.js, stream: h.sj.LogStream()}
	flaky.fails.Store(3)
	h.js = flaky
	b := h.start("b.1", nil)
	natstest.Eventually(t, 10*time.Second, "the log replayed", func() (bool, string) {
		select {
		case err := <-b.done:
			t.Fatalf("the new owner stopped: %v", err)
		default:
		}
		got := h.state(b.db)
		return got.Log == want.Log && got.Pos == want.Pos, fmt.Sprintf("state %+v, want %+v", got, want)
	})
	if flaky.fails.Load() >= 0 {
		t.Fatal("no log read failed: the test did not test that")
	}
}
