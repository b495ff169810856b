package counter

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/stages/hop"
	"github.com/tally-dev/tally/store/checkpoint"
	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/delivery"
)

// heldStore keeps the payloads of the delta batches the worker holds above a gap in the
// partition's Badger keys (checkpoint.PutHeld): each written in a transaction of its own
// when held, deleted by the checkpoint whose marks no longer hold it.
type heldStore struct {
	db     *cold.DB
	family string
	p      int
	// released are the batches handed out since the last checkpoint: the next one
	// deletes their payloads.
	released []delivery.HeldRef
}

func (s *heldStore) Put(src uint32, seq uint64, data []byte) error {
	return checkpoint.PutHeld(s.db, s.family, s.p, delivery.HeldRef{Src: src, Seq: seq}, data)
}

func (s *heldStore) Get(src uint32, seq uint64) ([]byte, error) {
	return checkpoint.GetHeld(s.db, s.family, s.p, delivery.HeldRef{Src: src, Seq: seq})
}

func (s *heldStore) Delete(src uint32, seq uint64) error {
	s.released = append(s.released, delivery.HeldRef{Src: src, Seq: seq})
	return nil
}

// dropOrphans deletes the payloads of batches the loaded marks do not hold: written
// after the last checkpoint by a run that crashed, or released by it. What the stream
// holds after the checkpoint is received again, and held again if it must be.
func (w *Worker) dropOrphans() error {
	refs, err := checkpoint.HeldRefs(w.db, w.cfg.Family.Name, w.cfg.Partition)
	if err != nil || len(refs) == 0 {
		return err
	}
	held := map[delivery.HeldRef]bool{}
	for src, m := range w.cp.Marks {
		for _, h := range m.Held {
			held[delivery.HeldRef{Src: src, Seq: h.Seq}] = true
		}
	}
	var orphans []delivery.HeldRef
	for _, r := range refs {
		if !held[r] {
			orphans = append(orphans, r)
		}
	}
	return checkpoint.DeleteHeld(w.db, w.cfg.Family.Name, w.cfg.Partition, orphans)
}

// accept hands the decoded batch b (whose encoding is data) to the deltas' hop and
// applies it if it is next, then what it releases, strictly in each source's order:
// adds saturate at 0 and reads set 0, so a -1 applied before the +1 sent ahead of it
// would leave 1 for ever. A batch above a gap is held — its payload in Badger, its
// number in the checkpoint's marks — until the gap fills.
func (w *Worker) accept(ctx context.Context, data []byte, b *pipeline.DeltaBatch) error {
	v, err := w.in.Offer(b.Source, b.Seq, data)
	if err != nil {
		return fmt.Errorf("counter %s/%d: %w", w.cfg.Family.Name, w.cfg.Partition, err)
	}
	switch v {
	case hop.Dup:
		w.stats.Duplicates.Add(1)
		return nil
	case hop.Apply:
		if err := w.applyDeltas(b); err != nil {
			return err
		}
	}
	return w.release(ctx)
}

// release applies the held batches that are next, one at a time, checkpointing whenever
// MaxDirty deltas are applied: a checkpoint holds at most MaxDirty ids and a batch more,
// whatever a gap releases, and what is not applied yet stays held in its marks. It ends
// with ctx, what it has not applied still held: a gap that filled may release a whole
// backlog, a checkpoint every MaxDirty ids, each behind Badger's compactions on a
// loaded machine, and a partition stopping (its lease lost) waited for all of them —
// up to 10 minutes — before it could start again anywhere.
func (w *Worker) release(ctx context.Context) error {
	for ctx.Err() == nil {
		if w.changed >= w.cfg.MaxDirty {
			if err := w.flush(ctx); err != nil {
				return err
			}
		}
		_, _, data, ok, err := w.in.Next()
		if err != nil {
			return fmt.Errorf("counter %s/%d: %w", w.cfg.Family.Name, w.cfg.Partition, err)
		}
		if !ok {
			return nil
		}
		if len(data) == 0 {
			continue // a number filled by a dead-lettered batch
		}
		if err := pipeline.DecodeDeltaBatch(data, &w.held); err != nil {
			return fmt.Errorf("counter %s/%d: held delta batch: %w", w.cfg.Family.Name, w.cfg.Partition, err)
		}
		if err := w.applyDeltas(&w.held); err != nil {
			return err
		}
	}
	return nil
}

// fill takes the number of an undecodable delta batch, read from its message id, as
// applied with nothing in it: otherwise its source's later batches would wait above the
// gap until it is given up, and be lost with it. A message with another id is not a
// batch of a source's sequence, and fills nothing.
func (w *Worker) fill(ctx context.Context, m jetstream.Msg) error {
	src, dest, seq, ok := pipeline.ParseDeltaMsgID(m.Headers().Get(jetstream.MsgIDHeader))
	if !ok || dest != fmt.Sprintf("%s.%d", w.cfg.Family.Name, w.cfg.Partition) {
		return nil
	}
	v, err := w.in.Skip(uint32(src), seq)
	if err != nil {
		return fmt.Errorf("counter %s/%d: %w", w.cfg.Family.Name, w.cfg.Partition, err)
	}
	if v == hop.Dup {
		return nil
	}
	return w.release(ctx)
}

func (w *Worker) deadLetter(m jetstream.Msg, seq uint64, reason error) {
	w.stats.Bad.Add(1)
	w.log.Error("undecodable delta batch dead-lettered", "seq", seq, "err", reason)
	msg := &nats.Msg{Subject: w.cfg.Subjects.DLQ("counter."+w.cfg.Family.Name, w.cfg.Partition), Data: m.Data(),
		Header: nats.Header{jetstream.MsgIDHeader: []string{pipeline.DeadLetterMsgID("counter."+w.cfg.Family.Name, w.cfg.Partition, seq, -1)}, "Tally-Error": []string{reason.Error()}}}
	if _, err := w.js.PublishMsgAsync(msg); err != nil {
		w.log.Error("cannot dead-letter delta batch", "seq", seq, "err", err)
	}
}

// applyDeltas applies one batch the hop released.
func (w *Worker) applyDeltas(b *pipeline.DeltaBatch) error {
	fields := uint8(len(w.cfg.Family.Fields))
	if err := w.prefetch(b.Deltas); err != nil {
		return fmt.Errorf("counter %s/%d: %w", w.cfg.Family.Name, w.cfg.Partition, err)
	}
	for _, d := range b.Deltas {
		if d.Field >= fields {
			continue // validated by the producer stage; a newer config's field is ignored, not fatal
		}
		isCold, err := w.warm(d.ID)
		if err != nil {
			// The marks already count the batch as applied, but they are not
			// persisted: the worker stops and a restart resumes from the last
			// checkpoint, before it.
			return fmt.Errorf("counter %s/%d: %w", w.cfg.Family.Name, w.cfg.Partition, err)
		}
		var v uint64
		switch d.Op {
		case pipeline.OpAdd:
			v = w.table.Add(d.ID, int(d.Field), d.N)
		case pipeline.OpSet:
			v = uint64(max(d.N, 0))
			w.table.Set(d.ID, int(d.Field), v)
		}
		// A counter left above zero keeps its id in the table: only one at zero may
		// have left it, all of its counters zero.
		if isCold && v == 0 && !w.table.Get(d.ID, w.scratch) {
			if w.cold.zeroed == nil {
				w.cold.zeroed = map[uint64]struct{}{}
			}
			w.cold.zeroed[d.ID] = struct{}{}
		}
		w.changed++
	}
	w.applyWindows(b)
	w.stats.Batches.Add(1)
	w.stats.Deltas.Add(int64(len(b.Deltas)))
	return nil
}
