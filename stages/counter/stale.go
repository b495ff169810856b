package counter

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/tally-dev/tally/stages/flow"
)

// staleEvery is how long one reading of how far the worker is behind its stream serves
// the reads of a standby: each costs JetStream requests, and a standby answers reads
// only while its partition has no owner, when every reader of the partition asks it.
const staleEvery = 100 * time.Millisecond

// staleBehind keeps the last reading of Behind for Stale.
type staleBehind struct {
	mu     sync.Mutex
	at     time.Time
	pos    uint64
	behind flow.Behind
}

// Stale fills out[i] with the counters of ids[i] as the worker has applied them so far,
// whether or not the partition is this process's (a standby answering while its owner
// is gone), and says how far behind its stream that state is. The state is consistent:
// every delta up to the worker's position applied, in order, and none after it.
func (w *Worker) Stale(ctx context.Context, ids []uint64, out [][]uint64) (flow.Behind, error) {
	var pos uint64
	if w.peek(false, func() bool { pos = w.pos.Load(); return len(w.readCounts(ids, out, nil)) == 0 }) {
		return w.behindAt(ctx, pos)
	}
	q := newQuery()
	q.ids, q.out = ids, out
	if err := w.ask(ctx, q); err != nil {
		return flow.Behind{}, err
	}
	return w.behindAt(ctx, q.pos)
}

// behindAt is how far behind its stream the state at position pos is, as the worker
// knew at most staleEvery ago: a reading that young of a position at or before pos
// serves, less the messages applied since, aged by the time since when it still lags
// (the oldest delta not applied at pos is no older than the one not applied then), and
// nothing behind once every message it counted is applied (the protocol's "0 when it
// had applied every one": it said up to 100 ms with none left, TestBehindAtCaughtUp).
func (w *Worker) behindAt(ctx context.Context, pos uint64) (flow.Behind, error) {
	sb := &w.staleBehind
	sb.mu.Lock()
	defer sb.mu.Unlock()
	now := time.Now()
	if since := now.Sub(sb.at); since < staleEvery && sb.pos <= pos && !sb.at.IsZero() {
		b := sb.behind
		if b.Msgs -= min(b.Msgs, pos-sb.pos); b.Msgs > 0 {
			b.Age += since
		} else {
			b.Age = 0
		}
		return b, nil
	}
	b, err := w.behind.Behind(ctx, pos, now)
	if err != nil {
		return flow.Behind{}, fmt.Errorf("partition %s/%d: cannot tell how far behind it is: %w", w.cfg.Family.Name, w.cfg.Partition, err)
	}
	sb.at, sb.pos, sb.behind = now, pos, b
	return b, nil
}
