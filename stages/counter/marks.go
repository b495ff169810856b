package counter

import (
	"fmt"

	"github.com/tally-dev/tally/pipeline"
)

// accept hands the decoded batch b (whose encoding is data) to the deltas' hop and
// applies what it releases, strictly in each source's order: adds saturate at 0 and
// reads set 0, so a -1 applied before the +1 sent ahead of it would leave 1 for ever. A
// batch above a gap is held — in the checkpoint, with the marks — until the gap fills.
func (w *Worker) accept(data []byte, b *pipeline.DeltaBatch) error {
	ready, dup := w.in.Accept(b.Source, b.Seq, data)
	if dup {
		w.stats.Duplicates.Add(1)
		return nil
	}
	for _, p := range ready {
		batch := b
		if !same(p, data) {
			// A held batch it unblocks: it decoded when it arrived.
			batch = &w.held
			if err := pipeline.DecodeDeltaBatch(p, batch); err != nil {
				return fmt.Errorf("counter %s/%d: held delta batch: %w", w.cfg.Family.Name, w.cfg.Partition, err)
			}
		}
		if err := w.applyDeltas(batch); err != nil {
			return err
		}
	}
	return nil
}

// applyDeltas applies one batch the hop released.
func (w *Worker) applyDeltas(b *pipeline.DeltaBatch) error {
	fields := uint8(len(w.cfg.Family.Fields))
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
		switch d.Op {
		case pipeline.OpAdd:
			w.table.Add(d.ID, int(d.Field), d.N)
		case pipeline.OpSet:
			w.table.Set(d.ID, int(d.Field), uint64(max(d.N, 0)))
		}
		if isCold && !w.table.Get(d.ID, w.scratch) {
			if w.cold.zeroed == nil {
				w.cold.zeroed = map[uint64]struct{}{}
			}
			w.cold.zeroed[d.ID] = struct{}{}
		}
		w.changed++
	}
	w.stats.Batches.Add(1)
	w.stats.Deltas.Add(int64(len(b.Deltas)))
	return nil
}

// same reports whether p is data itself (not a copy): the hop returns the batch it was
// given first when that batch was next, which is then applied as already decoded.
func same(p, data []byte) bool {
	return len(p) == len(data) && (len(p) == 0 || &p[0] == &data[0])
}
