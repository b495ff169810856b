package counter

import (
	"context"
	"fmt"
)

// A partition's reads: gets, windowed gets and tops, answered by its worker's goroutine
// between delta messages (answer, answerWaiting), and while a checkpoint waits for
// Badger (serving); a get of ids in RAM, a windowed get, a top or a stale read is read
// by its asker itself while that goroutine waits (peek).

// query is one read of the partition, asked on the worker's queries channel.
type query struct {
	ids []uint64
	out [][]uint64 // out[i] has Fields() counters for ids[i]
	// changes, for a windowed query, has Fields() changes for ids[i] since minute since.
	changes [][]int64
	since   uint32
	// top, for a top query, is what it asks and gets (see Top).
	top  *topQuery
	pos  uint64 // the position the answer reflects
	err  error
	done chan struct{} // given one value when answered (answered)
	// ctx, w and wait, in a query from queryPool (Send, SendWindow): the request's
	// context, the worker asked, and q.waitFree, made once for the query's lifetimes.
	ctx  context.Context
	w    *Worker
	wait func() error
}

// newQuery is a query whose answer is told on its done.
func newQuery() *query { return &query{done: make(chan struct{}, 1)} }

// answered tells the waiter q is answered; the worker does not touch q after it.
func (q *query) answered() { q.done <- struct{}{} }

// pooled is a query of queryPool for w, asked within ctx.
func (w *Worker) pooled(ctx context.Context) *query {
	q := queryPool.Get().(*query)
	if q.wait == nil { // new
		q.wait = q.waitFree
	}
	q.ctx, q.w = ctx, w
	return q
}

// waitFree waits for the answer to q (as Worker.wait) and, once it came, gives q back to
// queryPool: neither the worker nor the asker refers to it then. A query not answered
// (its context ended, its worker stopped) is left to the collector: the worker may still
// hold it.
func (q *query) waitFree() error {
	answered, err := q.w.wait(q.ctx, q)
	if answered {
		q.free()
	}
	return err
}

// free gives q, of queryPool, back to it.
func (q *query) free() {
	*q = query{done: q.done, wait: q.wait}
	queryPool.Put(q)
}

// Get fills out[i] with the counters of ids[i]; it blocks until the worker answers or ctx
// ends.
func (w *Worker) Get(ctx context.Context, ids []uint64, out [][]uint64) error {
	return w.Send(ctx, ids, out)()
}

// Send hands the worker a get of ids and returns without waiting for its answer; the
// function it returns waits for it (as Get) and must be called, once: the query is
// reused once its answer has been waited for (queryPool). A request's partitions
// are all asked this way before it waits for any, with no goroutine each.
func (w *Worker) Send(ctx context.Context, ids []uint64, out [][]uint64) (wait func() error) {
	if w.peek(true, func() bool { return len(w.readCounts(ids, out, nil)) == 0 }) {
		return answeredNow
	}
	q := w.pooled(ctx)
	q.ids, q.out = ids, out
	return w.sendQuery(ctx, q)
}

// answeredNow is the wait of a get already answered.
func answeredNow() error { return nil }

// peek runs read, a get's own reading of what its query would read, when the worker's
// goroutine waits where it answers queries (Run releases w.view there): the get is not
// handed to the partition's goroutine, which on a busy machine waited for a core to be
// scheduled — a get of 20 ids asks some 12 partitions. It reports false, and the get is
// to be sent, when the worker is busy (w.view held: the get is queued and answered
// between its delta messages, as ever), not ready, not the owner when owner is asked
// for (sendQuery says why; a standby's stale read is not), or read reports false.
func (w *Worker) peek(owner bool, read func() bool) bool {
	if !w.view.TryLock() {
		return false
	}
	defer w.view.Unlock()
	if !w.ready.Load() || owner && w.cfg.Valid != nil && !w.cfg.Valid() || !read() {
		return false
	}
	w.stats.Peeked.Add(1)
	return true
}

// readCounts fills out with the counters of ids in RAM (zero for an id not counted) and
// appends to cold the places of the ids in the cold tier, whose counters only the
// worker reads (readCold, from Badger).
func (w *Worker) readCounts(ids []uint64, out [][]uint64, cold []int) []int {
	for i, id := range ids {
		if !w.table.Get(id, out[i]) && w.isCold(id) {
			cold = append(cold, i)
		}
	}
	return cold
}

// sendQuery hands q to the worker, as Send, unless the partition is not this process's.
func (w *Worker) sendQuery(ctx context.Context, q *query) (wait func() error) {
	var err error
	if w.cfg.Valid != nil && !w.cfg.Valid() {
		err = fmt.Errorf("%w: partition %s/%d", ErrNotOwned, w.cfg.Family.Name, w.cfg.Partition)
	} else if err = w.send(ctx, q); err == nil {
		if q.wait != nil {
			return q.wait
		}
		return func() error {
			_, err := w.wait(ctx, q)
			return err
		}
	}
	if q.wait != nil { // never sent
		q.free()
	}
	return func() error { return err }
}

// ask hands q to the worker's goroutine and waits for its answer.
func (w *Worker) ask(ctx context.Context, q *query) error {
	if err := w.send(ctx, q); err != nil {
		return err
	}
	_, err := w.wait(ctx, q)
	return err
}

// send queues q for the worker's goroutine; a worker that has stopped answers
// ErrStopped at once (the query asks the partition's next owner).
func (w *Worker) send(ctx context.Context, q *query) error {
	select {
	case w.queries <- q:
		w.stats.Queued.Add(1)
		return nil
	case <-w.stopped:
		return w.errStopped()
	case <-ctx.Done():
		return fmt.Errorf("partition %s/%d did not answer: %w", w.cfg.Family.Name, w.cfg.Partition, ctx.Err())
	}
}

// wait waits for the answer to q, sent. A query still queued when the worker stops is
// never answered: once Run has returned, q is answered or never will be (Run answers
// what it takes before it closes stopped), and it is then ErrStopped.
func (w *Worker) wait(ctx context.Context, q *query) (answered bool, err error) {
	select {
	case <-q.done:
		return true, q.err
	case <-w.stopped:
		select {
		case <-q.done:
			return true, q.err
		default:
			return false, w.errStopped()
		}
	case <-ctx.Done():
		return false, fmt.Errorf("partition %s/%d did not answer: %w", w.cfg.Family.Name, w.cfg.Partition, ctx.Err())
	}
}

func (w *Worker) errStopped() error {
	return fmt.Errorf("partition %s/%d: %w", w.cfg.Family.Name, w.cfg.Partition, ErrStopped)
}

func (w *Worker) answer(q *query) {
	q.pos = w.pos.Load() // cp.Pos is the checkpoint's while one is taken (serving)
	if q.top != nil {
		w.answerTop(q)
		return
	}
	if q.changes != nil {
		w.answerWindow(q)
		return
	}
	if cold := w.readCounts(q.ids, q.out, nil); len(cold) > 0 {
		q.err = w.readCold(q.ids, q.out, cold)
	}
	q.answered()
}

// answerWaiting answers the queries already waiting, and waits for none: between the
// messages of a batch of deltas, so that a read waits for one message's deltas rather
// than for up to 1 024 messages' (TestQueryAnsweredBetweenDeltaMessages).
func (w *Worker) answerWaiting() {
	for {
		select {
		case q := <-w.queries:
			w.answer(q)
		default:
			return
		}
	}
}

// serving runs fn in a goroutine of its own and answers queries until it returns. fn
// must not touch what a query reads (the table, the cold cache): a checkpoint that waits
// for Badger — behind every other partition's commits, or stalled while Badger compacts
// under a backlog — then does not keep the partition's readers waiting.
func (w *Worker) serving(fn func() error) error {
	done := make(chan error, 1)
	go func() { done <- fn() }()
	w.view.Unlock() // a get may be read meanwhile (peek)
	defer w.view.Lock()
	for {
		select {
		case err := <-done:
			return err
		case q := <-w.queries:
			w.view.Lock()
			w.answer(q)
			w.view.Unlock()
		}
	}
}
