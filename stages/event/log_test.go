package event

import (
	"context"
	"encoding/json"
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
	"github.com/tally-dev/tally/stages/hop"
	"github.com/tally-dev/tally/stages/hop/hoptest"
	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/graph"
	"github.com/tally-dev/tally/store/stagelog"
)

// logHarness runs event stages of partition 0 (of parts) on one real NATS server, each
// with its own Badger, as different owners would.
type logHarness struct {
	t     testing.TB
	js    jetstream.JetStream
	sj    pipeline.Subjects
	parts int
	tx    int
	opts  cold.Options  // for the databases run opens (Dir is set there)
	pub   hop.Publisher // what the stages run publish through (the JetStream context when nil)
	batch int           // the stages' MaxBatch (its default when 0)
	purge bool          // the stages purge their log (Config.PurgeLog)
	nolog bool          // the stages do not log (Config.Log false)
	// Config.LogWrites, ResidentBytes, MaxPayload and FanoutLimit of the stages run
	// (their defaults when 0).
	logWrites                 bool
	resident, payload, fanout int
}

func newLogHarness(t *testing.T) *logHarness { return newHarness(t, 1) }

func newHarness(t testing.TB, parts int) *logHarness {
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
		h.publish(pipeline.Event{Type: pipeline.TypeLike, UID: pipeline.ID(uid + i), Post: pipeline.ID(post)})
	}
}

// publish publishes each of evs in a message of its own.
func (h *logHarness) publish(evs ...pipeline.Event) {
	for _, e := range evs {
		data, err := pipeline.Marshal(&e, false)
		if err != nil {
			h.t.Fatal(err)
		}
		h.send(h.sj.Event(e.Type, e.Key()), data)
	}
}

// publishBatch publishes evs in one batch (keyed by the first: every key is partition
// 0's when there is one partition).
func (h *logHarness) publishBatch(evs []pipeline.Event) {
	h.send(h.sj.Event(pipeline.TypeBatch, evs[0].Key()), pipeline.AppendBatch(nil, &pipeline.Batch{Events: evs}))
}

// send publishes data to subject under a message id of its own.
func (h *logHarness) send(subject string, data []byte) {
	h.tx++
	msg := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{jetstream.MsgIDHeader: []string{fmt.Sprint("tx", h.tx)}}}
	if _, err := h.js.PublishMsg(context.Background(), msg); err != nil {
		h.t.Fatal(err)
	}
}

func (h *logHarness) msgs(stream string) uint64 { return h.streamState(stream).Msgs }

func (h *logHarness) streamState(stream string) jetstream.StreamState {
	st, err := h.js.Stream(context.Background(), stream)
	if err != nil {
		h.t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		h.t.Fatal(err)
	}
	return info.State
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
	st, err := New(Config{Partition: 0, Partitions: h.parts, Subjects: h.sj, Families: pipeline.DefaultFamilies(), Log: !h.nolog, Owner: owner, Publisher: h.pub, MaxBatch: h.batch, PurgeLog: h.purge,
		LogWrites: h.logWrites, ResidentBytes: h.resident, MaxPayload: h.payload, FanoutLimit: h.fanout},
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

// TestUnsentOutboxFromTheLog: a logging stage keeps its outbox in its log, not in
// Badger. A delta batch whose publish is lost stays unacknowledged while the batches of
// later transactions are stored; the stage stops without it. Whoever takes the state
// next — the same disk started again, or a standby that followed the log — sends it
// again, read from the record of the transaction that wrote it, and the deltas stream
// ends holding every batch once — also a stage started again without logging, which
// then keeps its outbox in Badger.
func TestUnsentOutboxFromTheLog(t *testing.T) {
	for _, next := range []string{"restart", "standby", "no longer logging"} {
		t.Run(next, func(t *testing.T) {
			t.Parallel() // each stops with its batch unacknowledged: 5 s (Stage.finish)
			h := newLogHarness(t)
			// Transactions of 5 likes, one after the other, while the reader keeps up:
			// an idle stage waits for its outbox to be stored before it takes more, so
			// that it may stop short of the 60.
			h.likes(100, 7, 60)
			pub := &hoptest.Hold{Publisher: h.js, Subject: h.sj.Delta(pipeline.FamilyPost, 0), Nth: 1, Pause: time.Second}
			h.pub, h.batch = pub, 5
			a := h.start("a.1", nil)
			var sb *runningStage
			if next == "standby" {
				h.pub = nil
				sb = h.run("b.1", nil, (*Stage).Mirror)
			}
			// One transaction after the one whose batch is held is what the checks need.
			// More were asked for before, and a stage idle a moment (its reader slower
			// than its commits: CI's other packages on both cores) settles its outbox,
			// which waits for the held batch for good: it stopped at 16 once, and at 1
			// (the held transaction itself) once, its reader not yet ready with the
			// second like; the held publish pauses a second for it (Pause).
			natstest.Eventually(t, 10*time.Second, "a transaction after the first committed", func() (bool, string) {
				return a.Position() > 5, fmt.Sprint("at ", a.Position()) // MaxBatch is 5
			})
			if pub.Held() == nil {
				t.Fatal("no delta batch of post partition 0 was published")
			}
			st := h.state(a.db)
			if st.Unsent == 0 || st.UnsentLog == 0 || st.UnsentLog >= st.Log || st.LogKept() != st.UnsentLog {
				t.Fatalf("state %+v: want the outbox kept in the log from a record before the state's own", st)
			}
			if _, out, err := stagelog.Load(a.db, 0); err != nil || len(out) != 0 {
				t.Fatalf("Badger holds %d outbox entries (%v), want none: the log keeps them", len(out), err)
			}
			if err := a.stop(); err != nil {
				t.Fatal(err)
			}
			batches := func(db *cold.DB) uint64 {
				st := h.state(db)
				var n uint64
				for _, seq := range st.Seqs {
					n += seq
				}
				return n
			}
			if got, want := h.msgs(h.sj.DeltasStream()), batches(a.db); got != want-1 {
				t.Fatalf("deltas stream holds %d batches before the restart, want %d (all but the one held)", got, want-1)
			}
			var b *runningStage
			switch next {
			case "restart":
				h.pub = nil
				b = h.start("a.2", a.db)
			case "no longer logging":
				h.pub, h.nolog = nil, true
				b = h.start("a.2", a.db)
			case "standby":
				// The owner's last record (it may have stopped between a record and its
				// commit: the standby applies the record all the same).
				last := h.streamState(h.sj.LogStream()).LastSeq
				natstest.Eventually(t, 10*time.Second, "standby at the owner's last record", func() (bool, string) {
					return sb.logged.Load() == last, fmt.Sprint("at record ", sb.logged.Load(), " of ", last)
				})
				if err := sb.stop(); err != nil {
					t.Fatal(err)
				}
				b = h.start("b.2", sb.db)
			}
			h.caughtUp(b)
			if got, want := h.msgs(h.sj.DeltasStream()), batches(b.db); got != want {
				t.Fatalf("deltas stream holds %d batches, want %d: the batch never acknowledged was not sent again", got, want)
			}
			if next == "no longer logging" {
				h.likes(1000, 7, 5)
				h.caughtUp(b)
				if st := h.state(b.db); st.Unsent != 0 || h.msgs(h.sj.DeltasStream()) != batches(b.db) {
					t.Fatalf("state %+v, %d batches of %d stored: want the outbox in Badger again, every batch stored", st, h.msgs(h.sj.DeltasStream()), batches(b.db))
				}
			}
		})
	}
}

// TestPurgeLogKeepsWhatTheStateNeeds: a stage that purges its own log (one process
// owning every partition, no backups) drops the records below the oldest its state
// needs (stagelog.State.LogKept), never one holding an outbox entry that may be unsent,
// and only once enough have piled up.
func TestPurgeLogKeepsWhatTheStateNeeds(t *testing.T) {
	h := newLogHarness(t)
	for i := range 200 {
		if _, err := h.js.Publish(context.Background(), h.sj.Log(0), []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	h.purge = true
	a := h.run("", nil, func(*Stage, context.Context) error { return nil })
	purge := func(st stagelog.State, want uint64) {
		t.Helper()
		a.st = st
		a.purgeLog(context.Background())
		if n := h.msgs(h.sj.LogStream()); n != want {
			t.Fatalf("after a purge at state %+v the log holds %d records, want %d", st, n, want)
		}
	}
	purge(stagelog.State{Log: 200, Unsent: 5, UnsentLog: 10}, 191)  // from the unsent entry's record on
	purge(stagelog.State{Log: 200, Unsent: 9, UnsentLog: 50}, 191)  // 40 more: too few yet
	purge(stagelog.State{Log: 200, Unsent: 12, UnsentLog: 80}, 121) // 70 more
	purge(stagelog.State{Log: 200, Unsent: 13, UnsentLog: 0}, 121)  // the log's first: nothing goes
	purge(stagelog.State{Log: 199}, 2)                              // all sent: the state's own on
	purge(stagelog.State{Log: 199, Unsent: 40, UnsentLog: 199}, 2)  // nothing more
}

// TestPurgedLogStartsAgain: a stage that purges its log as it goes keeps a few records
// of it, and started again on its state it goes on exactly: every delta batch once.
func TestPurgedLogStartsAgain(t *testing.T) {
	h := newLogHarness(t)
	h.likes(100, 7, 600)
	h.batch, h.purge = 2, true
	a := h.start("", nil)
	h.caughtUp(a)
	// A purge every purgeRecords records at most, from the one holding the oldest entry
	// in flight when the last transaction committed: a loaded machine leaves more.
	if n, txns := h.msgs(h.sj.LogStream()), h.state(a.db).N; n >= txns/2 {
		t.Fatalf("the log holds %d records after %d transactions, want fewer than %d", n, txns, txns/2)
	}
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	b := h.start("", a.db)
	h.likes(1000, 7, 30)
	h.caughtUp(b)
	batches := uint64(0)
	for _, seq := range h.state(b.db).Seqs {
		batches += seq
	}
	if got := h.msgs(h.sj.DeltasStream()); got != batches {
		t.Fatalf("deltas stream holds %d batches, want %d", got, batches)
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

// ackLostJS appends to subject and then says the append timed out, the first n times:
// the record is stored, its acknowledgement lost.
type ackLostJS struct {
	jetstream.JetStream
	subject string
	n       atomic.Int32
}

func (a *ackLostJS) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	ack, err := a.JetStream.PublishMsg(ctx, m, opts...)
	if err == nil && m.Subject == a.subject && a.n.Add(-1) >= 0 {
		return nil, context.DeadlineExceeded
	}
	return ack, err
}

// A log append whose acknowledgement is lost is tried again, and NATS refuses the try as
// written after another record (it checks the last sequence before the message id): the
// record is the stage's own, and the stage goes on. It stopped as fenced by another
// owner, then replayed its log — every few seconds while a 2 M-event backlog drained
// through a connection that NATS kept cutting off.
func TestLogAppendWhoseAcknowledgementWasLost(t *testing.T) {
	h := newLogHarness(t)
	lost := &ackLostJS{JetStream: h.js, subject: h.sj.Log(0)}
	lost.n.Store(2)
	h.js = lost
	a := h.start("a.1", nil)
	for i := range 4 {
		h.likes(100+40*i, 7, 40)
		h.caughtUp(a)
	}
	select {
	case err := <-a.done:
		t.Fatalf("the stage stopped: %v", err)
	default:
	}
	if lost.n.Load() >= 0 {
		t.Fatal("no acknowledgement was lost: the test did not test that")
	}
	st := h.state(a.db)
	if n, txns := h.msgs(h.sj.LogStream()), uint64(a.stats.Txns.Load()); n != txns || st.Log != h.streamState(h.sj.LogStream()).LastSeq {
		t.Fatalf("%d log records for %d transactions, the state at record %d of %d", n, txns, st.Log, h.streamState(h.sj.LogStream()).LastSeq)
	}
}

// TestDeadLetterOfAHugeMessageFitsItsRecord: a malformed message nearly as large as NATS
// takes is dead-lettered with as much of it as one NATS message holds; beside a state of
// many destinations, that does not fit in one log record, and the partition stopped on
// it. The dead letter goes without the message's bytes then, saying how many there were,
// and the partition goes on.
func TestDeadLetterOfAHugeMessageFitsItsRecord(t *testing.T) {
	h := newLogHarness(t)
	db, err := cold.Open(cold.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	st := stagelog.State{Seqs: map[string]uint64{}}
	for i := range 3000 { // a state of many destinations: ~40 KB
		st.Seqs[fmt.Sprintf("family%d.%d", i%7, i)] = uint64(1000 + i)
	}
	if err := db.Update(func(txn *cold.Txn) error { return stagelog.Put(txn, 0, &st) }); err != nil {
		t.Fatal(err)
	}
	junk := make([]byte, int(h.js.Conn().MaxPayload())-4096)
	junk[0] = 0xc1 // never used by MessagePack, and not JSON
	if _, err := h.js.Publish(context.Background(), h.sj.Event(pipeline.TypeLike, 1), junk); err != nil {
		t.Fatal(err)
	}
	h.likes(100, 7, 3)
	a := h.start("a.1", db)
	h.caughtUp(a)
	select {
	case err := <-a.done:
		t.Fatalf("the stage stopped: %v", err)
	default:
	}
	dlq, err := h.js.Stream(context.Background(), h.sj.DLQStream())
	if err != nil {
		t.Fatal(err)
	}
	m, err := dlq.GetLastMsgForSubject(context.Background(), h.sj.DLQ("event", 0))
	if err != nil {
		t.Fatal(err)
	}
	var dl DeadLetter
	if err := json.Unmarshal(m.Data, &dl); err != nil || dl.Size != len(junk) || len(dl.Data) != 0 || dl.Index != -1 {
		t.Fatalf("dead letter %+v (%v): want one without the message's %d bytes, saying how many", dl, err, len(junk))
	}
}
