package counter

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// purge drops the deltas the last checkpoint covers, at most every PurgeEvery. A failed
// purge is logged and tried again later: it only costs disk.
func (w *Worker) purge(ctx context.Context) {
	upTo := w.cp.Pos
	if w.cfg.BoundPurge {
		upTo = min(upTo, w.purgeLimit.Load())
	}
	if w.cfg.PurgeEvery <= 0 || time.Since(w.lastPurge) < w.cfg.PurgeEvery || upTo < w.purgedTo.Load() || w.purging.Load() {
		return
	}
	w.lastPurge = time.Now()
	// A JetStream request: off the worker's goroutine, so that a slow or absent NATS
	// delays the purge, not the partition's queries.
	w.purging.Store(true)
	w.purges.Go(func() {
		defer w.purging.Store(false)
		st, err := w.js.Stream(ctx, w.cfg.Subjects.DeltasStream())
		if err == nil {
			err = st.Purge(ctx, jetstream.WithPurgeSubject(w.cfg.Subjects.Delta(w.cfg.Family.Name, w.cfg.Partition)),
				jetstream.WithPurgeSequence(upTo+1))
		}
		if err != nil {
			if ctx.Err() == nil {
				w.log.Warn("cannot purge applied deltas", "err", err)
			}
			return
		}
		w.purgedTo.Store(upTo + 1)
	})
}

// SetPurgeLimit lets the worker purge deltas up to pos when BoundPurge is set: pos is
// covered by a backup of its state stored in NATS, so a new owner restoring that backup
// finds every delta after it still in the stream.
func (w *Worker) SetPurgeLimit(pos uint64) { w.purgeLimit.Store(pos) }
