package counter

import (
	"context"
	"slices"

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
	ends   []int               // windowed's, kept from flush to flush
}

func floorOf(top uint32) uint32 {
	if top < pipeline.WindowDay {
		return 0
	}
	return top - pipeline.WindowDay + 1
}

// loadWindows reads the stored window records into RAM, those of the day up to the
// checkpoint's WindowTop; an id left with nothing is deleted at the next checkpoints.
// Records an older tallyd stored apart from their counters are moved first
// (checkpoint.MoveRecords).
func (w *Worker) loadWindows() error {
	w.win = windows{table: window.New(), top: w.cp.WindowTop, dirty: map[uint64]struct{}{}}
	w.win.table.SetFloor(floorOf(w.win.top))
	w.win.pruned = w.win.table.Floor()
	if n, err := checkpoint.MoveRecords(w.db, w.cfg.Family.Name, w.cfg.Partition); err != nil {
		return err
	} else if n > 0 {
		w.log.Info("window records moved to this layout, each with its counters", "records", n)
	}
	return checkpoint.LoadWindows(w.db, w.cfg.Family.Name, w.cfg.Partition, func(id uint64, rec []byte) error {
		left, err := w.win.table.Put(id, rec)
		if err != nil {
			return err
		}
		if !left {
			w.win.gone = append(w.win.gone, id) // in id order, as stored
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

// windowed completes entries, the ids whose counters changed since the last checkpoint,
// with what the checkpoint stores of the windows (checkpoint's windows.go): each entry's
// record, or whether it has one no longer (Entry.Left); an entry for each id whose
// windows changed with no counter, and for up to maxGone forgotten ones. It returns
// entries and how many forgotten ids it took. First it compacts the windows when the
// floor has moved on pruneEvery minutes or half the arena is garbage, so that the ids
// that leaves with nothing are deleted with it.
func (w *Worker) windowed(entries []checkpoint.Entry) ([]checkpoint.Entry, int, error) {
	if f := w.win.table.Floor(); f >= w.win.pruned+pruneEvery || w.win.table.Worth() {
		n := len(w.win.gone)
		w.win.table.Prune(func(id uint64) {
			if _, ok := w.win.dirty[id]; !ok {
				w.win.gone = append(w.win.gone, id)
			}
		})
		if len(w.win.gone) > n { // kept in order and each once: entries look ids up in it
			slices.Sort(w.win.gone)
			w.win.gone = slices.Compact(w.win.gone)
		}
		w.win.pruned = f
	}
	// The records share one buffer: a checkpoint holds thousands.
	var buf []byte
	ends := slices.Grow(w.win.ends[:0], len(entries)+len(w.win.dirty))
	defer func() {
		if cap(ends) <= 4*w.cfg.MaxDirty { // kept unless a flush far larger than most made it
			w.win.ends = ends[:0]
		}
	}()
	var both []uint64 // the ids of entries whose windows changed too, if not all did
	found := 0
	for i := range entries {
		id := entries[i].ID
		_, dirty := w.win.dirty[id]
		if dirty {
			found++
		}
		from := len(buf)
		buf = w.win.table.Record(buf, id)
		ends = append(ends, len(buf))
		if len(buf) == from {
			entries[i].Left = w.recorded(id)
		}
	}
	if found < len(w.win.dirty) {
		both = make([]uint64, 0, found)
		for _, e := range entries {
			if _, ok := w.win.dirty[e.ID]; ok {
				both = append(both, e.ID)
			}
		}
		slices.Sort(both)
		var block []uint64
		for id := range w.win.dirty {
			if _, ok := slices.BinarySearch(both, id); ok {
				continue
			}
			if len(block)+len(w.scratch) > cap(block) {
				block = make([]uint64, 0, max(1024, len(w.scratch)))
			}
			n := len(block)
			block = block[:n+len(w.scratch)]
			counts := block[n:len(block):len(block)]
			if err := w.countsOf(id, counts); err != nil {
				return entries, 0, err
			}
			from := len(buf)
			buf = w.win.table.Record(buf, id)
			ends = append(ends, len(buf))
			entries = append(entries, checkpoint.Entry{ID: id, Counts: counts, Left: len(buf) == from})
		}
	}
	from := 0
	for i, end := range ends {
		if end > from {
			entries[i].Rec = buf[from:end:end]
		}
		from = end
	}
	gone := w.win.gone[:min(len(w.win.gone), maxGone)]
	for _, id := range gone {
		if w.win.table.Has(id) {
			continue // changed again since it was forgotten: its entry writes its record
		}
		e := checkpoint.Entry{ID: id, Left: true} // the counters stored with its record move back
		if c := make([]uint64, len(w.scratch)); w.table.Get(id, c) {
			e.Counts = c
		}
		entries = append(entries, e)
	}
	return entries, len(gone), nil
}

// recorded reports whether id may have a window record stored: every id with one is in
// the table, forgotten with its record still to delete, or changed since the last
// checkpoint (a prune may have emptied its record since).
func (w *Worker) recorded(id uint64) bool {
	if _, ok := w.win.dirty[id]; ok {
		return true
	}
	return w.win.table.Has(id) || w.forgotten(id)
}

// forgotten reports whether id is a forgotten id whose record is still to delete.
func (w *Worker) forgotten(id uint64) bool {
	_, ok := slices.BinarySearch(w.win.gone, id)
	return ok
}

// countsOf fills dst with id's counters: from the table, what RAM knows of a cold id,
// or Badger.
func (w *Worker) countsOf(id uint64, dst []uint64) error {
	if w.table.Get(id, dst) {
		return nil
	}
	if !w.isCold(id) {
		clear(dst)
		return nil
	}
	return w.readCold([]uint64{id}, [][]uint64{dst}, []int{0})
}

// windowsSaved takes note that a checkpoint wrote what windowed made, gone of the
// forgotten ids with it.
func (w *Worker) windowsSaved(gone int) {
	w.win.gone = w.win.gone[gone:]
	clear(w.win.dirty)
}

// GetWindow fills out[i][f] with the net change of field f of ids[i] in the minutes
// since, and after; it blocks until the worker answers or ctx ends.
func (w *Worker) GetWindow(ctx context.Context, ids []uint64, since uint32, out [][]int64) error {
	return w.SendWindow(ctx, ids, since, out)()
}

// SendWindow is GetWindow in two steps, as Send is Get's.
func (w *Worker) SendWindow(ctx context.Context, ids []uint64, since uint32, out [][]int64) (wait func() error) {
	if w.peek(true, func() bool { w.sumWindows(ids, since, out); return true }) {
		return answeredNow
	}
	q := w.pooled(ctx)
	q.ids, q.since, q.changes = ids, since, out
	return w.sendQuery(ctx, q)
}

// answerWindow answers a windowed query.
func (w *Worker) answerWindow(q *query) {
	w.sumWindows(q.ids, q.since, q.changes)
	q.answered()
}

// sumWindows fills out with the changes of ids since minute since.
func (w *Worker) sumWindows(ids []uint64, since uint32, out [][]int64) {
	for i, id := range ids {
		w.win.table.Sum(id, since, out[i])
	}
}
