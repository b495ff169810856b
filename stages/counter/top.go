package counter

import (
	"context"
	"time"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/store/window"
)

// A top ranks every id the partition holds changes of (window.Table.Top, linear in
// them: a millisecond for some 6 000 ids), too slow to do for every request of a busy
// trending page. So the worker keeps the tops asked in the last topKeep and ranks them
// again at each flush tick, off the requests' path: a request for the minutes a kept top
// was ranked for is answered from it, as of that tick (at most FlushInterval behind what
// the partition has applied, as change events are); any other is ranked when asked.
const topKeep = 30 * time.Second

// topKey is what a top asks: a field, the window's length in minutes, how many ids.
type topKey struct {
	field   uint8
	minutes uint32
	k       int
}

// kept is a top as last ranked, and when it was last asked.
type kept struct {
	since  uint32
	ranked []window.Ranked
	asked  time.Time
}

type tops map[topKey]*kept

// topQuery asks for the k ids whose field changed most over a window of minutes that
// starts at minute since.
type topQuery struct {
	key    topKey
	ranked []window.Ranked
}

// Top returns, best first, the k ids of the partition whose field changed most over the
// window of minutes that starts at minute since (window.Table.Top: exact, every id with
// changes ranked, as of the last flush tick at most); it blocks until the worker answers
// or ctx ends.
func (w *Worker) Top(ctx context.Context, field uint8, minutes, since uint32, k int) ([]window.Ranked, error) {
	return w.SendTop(ctx, field, minutes, since, k)()
}

// SendTop is Top in two steps, as Send is Get's.
func (w *Worker) SendTop(ctx context.Context, field uint8, minutes, since uint32, k int) (wait func() ([]window.Ranked, error)) {
	t := &topQuery{key: topKey{field, minutes, k}}
	if w.peek(true, func() bool { w.rankTop(t, since); return true }) {
		return func() ([]window.Ranked, error) { return t.ranked, nil }
	}
	q := newQuery()
	q.since, q.top = since, t
	sent := w.sendQuery(ctx, q)
	return func() ([]window.Ranked, error) {
		if err := sent(); err != nil {
			return nil, err
		}
		return q.top.ranked, nil
	}
}

// answerTop answers a top query (rankTop).
func (w *Worker) answerTop(q *query) {
	w.rankTop(q.top, q.since)
	q.answered()
}

// rankTop fills t, of the window starting at minute since, from the kept top when it
// was ranked for the same minutes, else ranks it now and keeps it: on the worker's
// goroutine (answerTop) or by its asker (SendTop's peek), never both at once.
func (w *Worker) rankTop(t *topQuery, since uint32) {
	if w.tops == nil {
		w.tops = tops{}
	}
	kp := w.tops[t.key]
	if kp == nil || kp.since != since {
		kp = &kept{since: since, ranked: w.win.table.Top(t.key.field, since, t.key.k)}
		w.tops[t.key] = kp
	}
	kp.asked = time.Now()
	t.ranked = kp.ranked
}

// refreshTops ranks the tops asked in the last topKeep again, for the minutes their
// windows cover at now, and forgets the others.
func (w *Worker) refreshTops(now time.Time) {
	for key, kp := range w.tops {
		if now.Sub(kp.asked) > topKeep {
			delete(w.tops, key)
			continue
		}
		kp.since = pipeline.WindowSince(now, key.minutes)
		kp.ranked = w.win.table.Top(key.field, kp.since, key.k)
	}
}
