package counter_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/buildinfo"
	"github.com/tally-dev/tally/pipeline/natstest"
	"github.com/tally-dev/tally/stages/counter"
	"github.com/tally-dev/tally/store/checkpoint"
)

// run starts a worker on r's database and returns it with the channel Run's result
// comes on: a worker that stops by itself is seen at once.
func (r *rig) run(cfg counter.Config) (*counter.Worker, <-chan error, context.CancelFunc) {
	w := counter.New(cfg, r.js, r.db, slog.New(slog.DiscardHandler), r.stats)
	ctx, cancel := context.WithCancel(context.Background())
	done, stopped := make(chan error, 1), make(chan struct{})
	go func() {
		done <- w.Run(ctx)
		close(stopped)
	}()
	r.t.Cleanup(func() {
		cancel()
		<-stopped
	})
	return w, done, cancel
}

// backlog is a held backlog: batches 2..batches+1 of one source over distinct ids, with
// the counts they make once batch 1 (one delta, on id base) fills the gap.
type backlog struct {
	base    uint64
	ids     int
	batches int
	want    map[uint64][]uint64
	bytes   int
}

// newBacklog spreads batches of perBatch ids (every field of each, as the event stage's
// coalesced batches carry them) over ids distinct ids.
func newBacklog(ids, batches, perBatch, fields int) *backlog {
	b := &backlog{base: 1 << 40, ids: ids, batches: batches, want: map[uint64][]uint64{}}
	add := func(id uint64, f int, n int64) {
		if b.want[id] == nil {
			b.want[id] = make([]uint64, fields)
		}
		b.want[id][f] += uint64(n)
	}
	add(b.base, 0, 1)
	for k := range batches {
		for i := range perBatch {
			id := b.base + uint64((k*perBatch+i)%ids)
			for f := range fields {
				add(id, f, int64(1+(k+f)%3))
			}
		}
	}
	return b
}

// batch returns batch seq (1: the filler) of the backlog's source.
func (b *backlog) batch(seq uint64, perBatch, fields int) pipeline.DeltaBatch {
	if seq == 1 {
		return pipeline.DeltaBatch{Source: 1, Seq: 1, Deltas: []pipeline.Delta{{ID: b.base, Field: 0, Op: pipeline.OpAdd, N: 1}}}
	}
	k := int(seq - 2)
	d := make([]pipeline.Delta, 0, perBatch*fields)
	for i := range perBatch {
		id := b.base + uint64((k*perBatch+i)%b.ids)
		for f := range fields {
			d = append(d, pipeline.Delta{ID: id, Field: uint8(f), Op: pipeline.OpAdd, N: int64(1 + (k+f)%3)})
		}
	}
	return pipeline.DeltaBatch{Source: 1, Seq: seq, Deltas: d}
}

func (r *rig) publishAsync(b *pipeline.DeltaBatch) int {
	r.t.Helper()
	data := pipeline.AppendDeltaBatch(nil, b)
	msg := &nats.Msg{Subject: r.sc.Subjects.Delta(r.fam.Name, 0), Data: data,
		Header: nats.Header{jetstream.MsgIDHeader: []string{pipeline.DeltaMsgID(int(b.Source), r.fam.Name+".0", b.Seq)}}}
	if _, err := r.js.PublishMsgAsync(msg); err != nil {
		r.t.Fatal(err)
	}
	return len(data)
}

func (r *rig) published() {
	r.t.Helper()
	select {
	case <-r.js.PublishAsyncComplete():
	case <-time.After(60 * time.Second):
		r.t.Fatal("publishes not acknowledged")
	}
	st, err := r.js.Stream(context.Background(), r.sc.Subjects.DeltasStream())
	if err != nil {
		r.t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		r.t.Fatal(err)
	}
	r.last = info.State.LastSeq
}

// check compares every id of the backlog with w's counts.
func (r *rig) check(w *counter.Worker, want map[uint64][]uint64) {
	r.t.Helper()
	ids := make([]uint64, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	for len(ids) > 0 {
		n := min(len(ids), 10000)
		out := make([][]uint64, n)
		for i := range out {
			out[i] = make([]uint64, len(r.fam.Fields))
		}
		if err := w.Get(context.Background(), ids[:n], out); err != nil {
			r.t.Fatal(err)
		}
		for i, id := range ids[:n] {
			for f, v := range want[id] {
				if out[i][f] != v {
					r.t.Fatalf("id %d field %d: %d, want %d", id, f, out[i][f], v)
				}
			}
		}
		ids = ids[n:]
	}
}

// Item 2(b): a gap that fills releases a backlog of 100 000 distinct ids (~50 MB of
// delta batches) held above it. The worker applies it a batch at a time and checkpoints
// every MaxDirty deltas, so no checkpoint holds more than MaxDirty ids and a batch —
// before, one checkpoint held every id, past Badger's transaction limit (ErrTxnTooBig),
// and the worker stopped at every start. A crash in the middle of the release resumes
// it from the checkpoint, exact.
func TestHeldBacklogReleasedInPieces(t *testing.T) {
	ids, batches, perBatch := 100_000, 1000, 1024
	if testing.Short() || buildinfo.Race {
		// Still more than twice the ids a checkpoint may hold (MaxDirty and a batch),
		// which is what fails on the old code; the full size took 112 s of CI under -race.
		ids, batches = 20_000, 200
	}
	fields := 4
	r := newRig(t)
	if len(r.fam.Fields) != fields {
		t.Fatalf("family %s has %d fields", r.fam.Name, len(r.fam.Fields))
	}
	bl := newBacklog(ids, batches, perBatch, fields)
	const maxDirty = 8192
	var largest atomic.Int64
	var checkpoints atomic.Int64
	var crashAt atomic.Int64 // the checkpoint after which the first worker crashes
	cfg := r.config()
	cfg.MaxDirty = maxDirty
	cfg.OnFlush = func(n int, _ time.Duration) {
		largest.Store(max(largest.Load(), int64(n)))
	}
	cfg.AfterCheckpoint = func() error {
		if n := checkpoints.Add(1); n == crashAt.Load() {
			return errCrash
		}
		return nil
	}
	w, done, _ := r.run(cfg)
	for seq := uint64(2); seq <= uint64(batches)+1; seq++ {
		b := bl.batch(seq, perBatch, fields)
		bl.bytes += r.publishAsync(&b)
	}
	r.published()
	natstest.Eventually(t, 60*time.Second, "every batch held", func() (bool, string) {
		select {
		case err := <-done:
			t.Fatalf("the worker stopped holding the backlog: %v", err)
		default:
		}
		return w.Position() >= r.last && r.stats.Hop.Held.Load() == int64(batches), fmt.Sprint(r.stats.Hop.Held.Load(), " held")
	})
	t.Logf("%d batches held: %d distinct ids, %.1f MB", batches, ids, float64(bl.bytes)/1e6)
	if b := r.stats.Hop.HeldBytes.Load(); b != int64(bl.bytes) {
		t.Fatalf("%d bytes held, want %d", b, bl.bytes)
	}

	// The filler: the worker crashes after a few checkpoints of the release.
	crashAt.Store(checkpoints.Load() + 5)
	filler := bl.batch(1, perBatch, fields)
	r.publishAsync(&filler)
	r.published()
	select {
	case err := <-done:
		if !errors.Is(err, errCrash) {
			t.Fatalf("the worker stopped releasing the backlog: %v, want the crash injected", err)
		}
	case <-time.After(120 * time.Second):
		t.Fatal("the worker did not checkpoint during the release")
	}
	cp, err := checkpoint.LoadCheckpoint(r.db, r.fam.Name, 0)
	if err != nil {
		t.Fatal(err)
	}
	if m := cp.Marks[1]; m == nil || m.Through < 2 || len(m.Held) == 0 {
		t.Fatalf("the crash left mark %+v, want a release cut in the middle", m)
	}
	t.Logf("crashed at batch %d of %d", cp.Marks[1].Through, batches+1)

	crashAt.Store(0)
	w = r.releasedAfterRestart(cfg, bl.want)
	if n := largest.Load(); n > maxDirty+int64(perBatch) {
		t.Fatalf("a checkpoint of %d ids, want at most MaxDirty (%d) and a batch's", n, maxDirty)
	}
	natstest.Eventually(t, 10*time.Second, "the released payloads deleted", func() (bool, string) {
		refs, err := checkpoint.HeldRefs(r.db, r.fam.Name, 0)
		return err == nil && len(refs) == 0, fmt.Sprint(len(refs), " payloads stored ", err)
	})
	if r.stats.Hop.GapsSkipped.Load() != 0 || r.stats.Hop.HeldBytes.Load() != 0 {
		t.Fatalf("%d gaps given up, %d bytes held", r.stats.Hop.GapsSkipped.Load(), r.stats.Hop.HeldBytes.Load())
	}
	// Every checkpoint of the release is at the filler's position: their change events
	// still have ids of their own, and the mirror ends equal to the counts.
	want0 := make(map[uint64]uint64, len(bl.want))
	for id, c := range bl.want {
		want0[id] = c[0]
	}
	r.mirrorEquals(want0)
	t.Logf("%d checkpoints, the largest %d ids", checkpoints.Load(), largest.Load())
}

// A worker stopped in the middle of a release stops there: what it has not applied
// stays held, and the next start releases it. It went on releasing the whole backlog, a
// checkpoint every MaxDirty ids, before it stopped — under a 27 M-id backlog, with
// each checkpoint behind Badger's compactions, a partition whose lease was lost took up
// to 10 minutes to stop, and could start again nowhere meanwhile.
func TestStopEndsARelease(t *testing.T) {
	const ids, batches, perBatch, fields = 12_800, 200, 64, 4
	r := newRig(t)
	bl := newBacklog(ids, batches, perBatch, fields)
	var checkpoints, stopAt atomic.Int64
	var stop atomic.Pointer[context.CancelFunc]
	cfg := r.config()
	cfg.MaxDirty = perBatch * fields // a checkpoint for every batch released
	cfg.AfterCheckpoint = func() error {
		if n := checkpoints.Add(1); n == stopAt.Load() {
			(*stop.Load())()
		}
		return nil
	}
	w, done, cancel := r.run(cfg)
	stop.Store(&cancel)
	for seq := uint64(2); seq <= batches+1; seq++ {
		b := bl.batch(seq, perBatch, fields)
		r.publishAsync(&b)
	}
	r.published()
	natstest.Eventually(t, 60*time.Second, "every batch held", func() (bool, string) {
		return w.Position() >= r.last && r.stats.Hop.Held.Load() == batches, fmt.Sprint(r.stats.Hop.Held.Load(), " held")
	})
	stopAt.Store(checkpoints.Load() + 5) // stopped a few checkpoints into the release
	filler := bl.batch(1, perBatch, fields)
	r.publishAsync(&filler)
	r.published()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the worker did not stop")
	}
	if after := checkpoints.Load() - stopAt.Load(); after > 2 {
		t.Fatalf("%d checkpoints after the stop, of %d batches to release: the stop waited for the release", after, batches)
	}
	cp, err := checkpoint.LoadCheckpoint(r.db, r.fam.Name, 0)
	if err != nil {
		t.Fatal(err)
	}
	if m := cp.Marks[1]; m == nil || len(m.Held) == 0 {
		t.Fatalf("the stop left mark %+v, want batches still held", m)
	}
	r.releasedAfterRestart(cfg, bl.want)
}

// releasedAfterRestart starts a worker again, waits until it has released every held
// batch, checks its counts against want and returns it.
func (r *rig) releasedAfterRestart(cfg counter.Config, want map[uint64][]uint64) *counter.Worker {
	r.t.Helper()
	w, done, _ := r.run(cfg)
	natstest.Eventually(r.t, 120*time.Second, "the held batches released after the restart", func() (bool, string) {
		select {
		case err := <-done:
			r.t.Fatalf("the restarted worker stopped: %v", err)
		default:
		}
		return w.Ready() && w.Position() >= r.last && r.stats.Hop.Held.Load() == 0, fmt.Sprint(r.stats.Hop.Held.Load(), " held")
	})
	r.check(w, want)
	return w
}
