package counter

import (
	"context"
	"fmt"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/store/checkpoint"
	"github.com/tally-dev/tally/store/window"
)

// maxGone is the most forgotten window records one checkpoint deletes from Badger: a
// prune may forget every id of a day, and a transaction stays bounded.
const maxGone = 4096

// pruneEvery is how far, in minutes, the windows' floor moves on before the worker
// compacts them (a pass over the ids active in the last day).
const pruneEvery = 10

// windows is a worker's windowed counts: the changes by minute of the ids changed in the
// day up to top, the newest minute applied. The floor follows top, never a clock, so an
// owner and its standby applying the same deltas keep the same windows.
type windows struct {
	table  *window.Table
	top    uint32
	dirty  map[uint64]struct{} // ids whose record the next checkpoint writes
	gone   []uint64            // ids forgotten whose stored record is still to delete
	pruned uint32              // the floor at the last prune
}

func floorOf(top uint32) uint32 {
	if top < pipeline.WindowDay {
		return 0
	}
	return top - pipeline.WindowDay + 1
}

// loadWindows reads the stored window records into RAM, those of the day up to the
// checkpoint's WindowTop; an id left with nothing is deleted at the next checkpoints.
func (w *Worker) loadWindows() error {
	w.win = windows{table: window.New(), top: w.cp.WindowTop, dirty: map[uint64]struct{}{}}
	w.win.table.SetFloor(floorOf(w.win.top))
	w.win.pruned = w.win.table.Floor()
	return checkpoint.LoadWindows(w.db, w.cfg.Family.Name, w.cfg.Partition, func(id uint64, rec []byte) error {
		left, err := w.win.table.Put(id, rec)
		if err != nil {
			return err
		}
		if !left {
			w.win.gone = append(w.win.gone, id)
		}
		return nil
	})
}

// applyWindows adds the window changes of a batch the hop released.
func (w *Worker) applyWindows(b *pipeline.DeltaBatch) {
	fields := uint8(len(w.cfg.Family.Fields))
	for _, x := range b.Windows {
		if x.Field >= fields {
			continue // as for deltas: a newer config's field is ignored
		}
		if x.Minute > w.win.top {
			w.win.top = x.Minute
			w.win.table.SetFloor(floorOf(x.Minute))
		}
		w.win.table.Add(x.ID, window.Change{Minute: x.Minute, Field: x.Field, N: x.N})
		w.win.dirty[x.ID] = struct{}{}
		w.changed++
	}
}

// windowEntries are what the next checkpoint writes of the windows: the records of the
// ids changed since the last one, and up to maxGone deletions of forgotten ones. First it
// compacts the windows when the floor has moved on pruneEvery minutes or half the arena
// is garbage, so that the ids that leaves with nothing are deleted with it.
func (w *Worker) windowEntries() []checkpoint.WindowEntry {
	if f := w.win.table.Floor(); f >= w.win.pruned+pruneEvery || w.win.table.Worth() {
		w.win.table.Prune(func(id uint64) {
			if _, ok := w.win.dirty[id]; !ok {
				w.win.gone = append(w.win.gone, id)
			}
		})
		w.win.pruned = f
	}
	gone := w.win.gone[:min(len(w.win.gone), maxGone)]
	if len(w.win.dirty) == 0 && len(gone) == 0 {
		return nil
	}
	out := make([]checkpoint.WindowEntry, 0, len(w.win.dirty)+len(gone))
	// The records share one buffer: a checkpoint holds thousands.
	var buf []byte
	ends := make([]int, 0, len(w.win.dirty))
	for id := range w.win.dirty {
		buf = w.win.table.Record(buf, id)
		ends = append(ends, len(buf))
		out = append(out, checkpoint.WindowEntry{ID: id})
	}
	from := 0
	for i, end := range ends {
		out[i].Rec = buf[from:end:end]
		from = end
	}
	for _, id := range gone {
		out = append(out, checkpoint.WindowEntry{ID: id})
	}
	return out
}

// windowsSaved takes note that a checkpoint wrote entries (windowEntries).
func (w *Worker) windowsSaved(entries []checkpoint.WindowEntry) {
	if len(entries) > 0 { // the deletions windowEntries took
		w.win.gone = w.win.gone[min(len(w.win.gone), maxGone):]
	}
	clear(w.win.dirty)
}

// GetWindow fills out[i][f] with the net change of field f of ids[i] in the minutes
// since, and after; it blocks until the worker answers or ctx ends.
func (w *Worker) GetWindow(ctx context.Context, ids []uint64, since uint32, out [][]int64) error {
	if w.cfg.Valid != nil && !w.cfg.Valid() {
		return fmt.Errorf("%w: partition %s/%d", ErrNotOwned, w.cfg.Family.Name, w.cfg.Partition)
	}
	q := &query{ids: ids, since: since, changes: out, done: make(chan struct{})}
	return w.ask(ctx, q)
}

// answerWindow answers a windowed query.
func (w *Worker) answerWindow(q *query) {
	for i, id := range q.ids {
		w.win.table.Sum(id, q.since, q.changes[i])
	}
	close(q.done)
}
