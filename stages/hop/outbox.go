package hop

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline/backoff"
	"github.com/tally-dev/tally/store/delivery"
)

// Publisher is what an Outbox sends through; a jetstream.JetStream is one.
type Publisher interface {
	PublishMsgAsync(msg *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error)
}

// StreamFinder tells which stream stores a subject; a jetstream.JetStream is one. An
// Outbox whose Publisher is also a StreamFinder tells a subject no stream captures (a
// permanent error) from a stream that does not answer now (a transient one).
type StreamFinder interface {
	StreamNameBySubject(ctx context.Context, subject string) (string, error)
}

// OutboxOptions configure an Outbox; the zero value is usable.
type OutboxOptions struct {
	// MaxInflight bounds the entries published but not yet acknowledged (default 1024):
	// Send waits for acknowledgements beyond it, so a backlog of any size is published
	// without overrunning the client's buffer of pending publishes.
	MaxInflight int
	// AckTimeout is how long a publish may go unacknowledged before it is sent again
	// under the same message id. The client fails pending publishes when the connection
	// drops, but a publish lost in a server restart without a disconnect being seen (or
	// an ack lost on the way) would otherwise hold the sender for ever; with the window,
	// it holds the entries to its destination for up to AckTimeout. When 0: what the
	// Publisher's AckTimeout method says, if it has one and it is positive (a test's
	// hoptest.FaultyPublisher that loses publishes), else DefaultAckTimeout.
	AckTimeout time.Duration
	// Backoff and MaxBackoff space the re-sends of failed publishes while Send or Reap
	// waits (defaults 50 ms, doubling up to 2 s), so an absent server is not hammered.
	Backoff, MaxBackoff time.Duration
	// Permanent is told of an entry that can never be stored as it is — no stream
	// captures its subject, it is larger than the server or the stream accepts — and
	// returns what to publish in its place, in order: a dead letter saying why and, for
	// a numbered batch, an empty batch under its number, so that its channel does not
	// stall at the gap it would leave. Nothing drops the entry. The entry is retired
	// (reported by Published) once the last of them is stored; one of them that can
	// never be stored either is dropped, never replaced in turn. Without Permanent such
	// an entry is retried like any other failure.
	Permanent func(e delivery.OutboxEntry, err error) []delivery.OutboxEntry
	// Retries, when set, counts failed publishes that are sent again.
	Retries *atomic.Int64
	// Log receives at most one line a second about failed publishes.
	Log *slog.Logger
}

// Outbox publishes committed outbox entries until each is stored. It is not safe for
// concurrent use: one goroutine owns it, as it owns the state the entries came from.
//
// Each subject is a destination with a window (see Window and WindowBytes): an entry is
// published only while fewer than Window entries, and with it at most WindowBytes of
// payload, to its subject were published since, and including, the oldest one to that
// subject not yet known to be stored (an entry larger than WindowBytes goes alone).
// Re-sends keep their place. Entries the caller's outbox no longer holds (a gap in
// OutboxEntry.Seq: stored and deleted before this Outbox started, to a destination and
// of a size it cannot know) fill the window: what comes after such a gap waits until
// every entry before it to its destination is stored. A receiver therefore never sees an
// entry Window or more places, or more than WindowBytes, after one that is still to
// come, however long a lost publish takes to be noticed and sent again, across restarts.
type Outbox struct {
	pub  Publisher
	opts OutboxOptions

	inflight  []inflight
	windows   map[string]*window // by subject (a few: partitions and families)
	pass      uint64             // counts collect passes, to find each window's oldest
	lastSeq   uint64             // the Seq of the last entry Send took
	holes     uint64             // the gaps in Seq between the entries Send took
	published []uint64
	log       FailureLog
}

type inflight struct {
	entry delivery.OutboxEntry
	rest  []delivery.OutboxEntry // replacements to publish once entry is stored
	// entry is a replacement (or the last of them): it is dropped, not replaced again,
	// when it cannot be stored either
	replaced bool
	dest     string                 // the subject of the entry as sent: its window
	w        *window                // the window of dest
	place    uint64                 // its place in dest's window
	at       uint64                 // the payload bytes sent to dest before it, in that window
	holes    uint64                 // the gaps in Seq before it
	fut      jetstream.PubAckFuture // nil: to be sent (again)
	sent     time.Time
}

// window is what one destination has in flight. Places count the entries sent to it in
// the order Send took them; a window with nothing in flight is empty, and counts afresh
// from 0.
type window struct {
	next, nextAt                  uint64 // the place of the next entry, and the bytes before it
	oldest, oldestAt, oldestHoles uint64 // those of the oldest entry not yet known to be stored
	n                             int    // entries in flight
	pass                          uint64 // the collect pass that last found oldest
}

// DefaultAckTimeout is the AckTimeout of an Outbox. A JetStream ack takes milliseconds;
// one that takes seconds comes from a server that is slow or electing a leader, and
// sending again then only adds load where it hurts. Lost publishes are rare (a server
// restart the client did not see), and thanks to the window one costs a pause of the
// entries to its destination, never an entry.
const DefaultAckTimeout = 10 * time.Second

// ackTimer is a Publisher that says how long its publishes may go unacknowledged.
type ackTimer interface{ AckTimeout() time.Duration }

// AckTimeout is how long a publish through p may go unacknowledged before it is taken
// as failed: what p's AckTimeout method says, if it has one and it is positive, else
// DefaultAckTimeout.
func AckTimeout(p Publisher) time.Duration {
	if at, ok := p.(ackTimer); ok && at.AckTimeout() > 0 {
		return at.AckTimeout()
	}
	return DefaultAckTimeout
}

// NewOutbox returns an outbox publishing through p.
func NewOutbox(p Publisher, opts OutboxOptions) *Outbox {
	if opts.MaxInflight <= 0 {
		opts.MaxInflight = 1024
	}
	if opts.AckTimeout <= 0 {
		opts.AckTimeout = AckTimeout(p)
	}
	if opts.Backoff <= 0 {
		opts.Backoff = 50 * time.Millisecond
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = 2 * time.Second
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	return &Outbox{pub: p, opts: opts, windows: map[string]*window{}}
}

// Len is the number of entries not yet known to be stored.
func (o *Outbox) Len() int { return len(o.inflight) }

// Oldest returns the Seq of the oldest entry above floor not yet known to be stored,
// and false when there is none. Send took every entry in the order of its Seq and
// entries stay in flight in that order, replacements under their entry's Seq: every
// entry Send took before it, above floor, is stored.
func (o *Outbox) Oldest(floor uint64) (uint64, bool) {
	for i := range o.inflight {
		if seq := o.inflight[i].entry.Seq; seq > floor {
			return seq, true
		}
	}
	return 0, false
}

// Published returns the sequences (OutboxEntry.Seq) of the entries stored since the last
// call; the caller deletes them from its outbox in its next transaction.
func (o *Outbox) Published() []uint64 {
	p := o.published
	o.published = nil
	return p
}

// Send publishes entries in order without waiting for their acknowledgements, except
// that it waits while MaxInflight are outstanding, or while the next entry's
// destination has its window full: later entries, to any destination, wait behind it.
// Entries come in the order of their Seq. It returns early only when ctx ends;
// whatever is not stored then stays in the caller's outbox and is sent again at its
// next start.
func (o *Outbox) Send(ctx context.Context, entries []delivery.OutboxEntry) error {
	for _, e := range entries {
		for len(o.inflight) >= o.opts.MaxInflight || !o.room(&e) {
			if err := o.reap(ctx, o.opts.MaxInflight-1, &e, nil); err != nil {
				return err
			}
		}
		o.inflight = append(o.inflight, o.enter(e))
		if !o.publish(ctx, &o.inflight[len(o.inflight)-1]) {
			o.inflight = o.inflight[:len(o.inflight)-1]
		}
	}
	return nil
}

// Reap collects acknowledgements. With wait it returns only once every entry is stored,
// re-sending failures with backoff, or when ctx ends.
func (o *Outbox) Reap(ctx context.Context, wait bool) error {
	if !wait {
		o.collect(ctx, -1, "", nil)
		o.resend(ctx)
		return nil
	}
	return o.reap(ctx, 0, nil, nil)
}

// ReapUntil is Reap with wait that returns as well, having settled what it could, once
// wake is ready: it reports whether every entry is stored. An event partition with
// nothing to apply settles its outbox so until a message comes, which would otherwise
// wait for every acknowledgement in flight — AckTimeout for one lost on its way.
func (o *Outbox) ReapUntil(ctx context.Context, wake <-chan struct{}) (bool, error) {
	switch err := o.reap(ctx, 0, nil, wake); {
	case errors.Is(err, errWoken):
		return false, nil
	case err != nil:
		return false, err
	}
	return true, nil
}

// room reports whether e may be published now: its window is empty, or has room for it.
func (o *Outbox) room(e *delivery.OutboxEntry) bool {
	w := o.windows[e.Subject]
	return w == nil || w.n == 0 || w.next-w.oldest < Window && w.nextAt+uint64(len(e.Data))-w.oldestAt <= WindowBytes &&
		o.holesAt(e) == w.oldestHoles
}

// holesAt is the number of gaps in Seq before e, were Send to take it next. Before the
// first entry there is none: whatever was deleted below it was stored.
func (o *Outbox) holesAt(e *delivery.OutboxEntry) uint64 {
	if o.lastSeq != 0 && e.Seq > o.lastSeq+1 {
		return o.holes + 1
	}
	return o.holes
}

// enter gives e its place in its destination's window.
func (o *Outbox) enter(e delivery.OutboxEntry) inflight {
	o.holes = o.holesAt(&e)
	o.lastSeq = max(o.lastSeq, e.Seq)
	w := o.windows[e.Subject]
	if w == nil {
		w = &window{}
		o.windows[e.Subject] = w
	}
	if w.n == 0 {
		*w = window{oldestHoles: o.holes}
	}
	f := inflight{entry: e, dest: e.Subject, w: w, place: w.next, at: w.nextAt, holes: o.holes}
	w.next++
	w.nextAt += uint64(len(e.Data))
	w.n++
	return f
}

// leave takes f out of its destination's window. The window's oldest place is found
// again at the end of the collect pass (or stays put: f was not the oldest, or the
// window is empty now).
func (o *Outbox) leave(f *inflight) { f.w.n-- }

// reap waits until at most left entries are outstanding and, unless next is nil, next
// may be published.
func (o *Outbox) reap(ctx context.Context, left int, next *delivery.OutboxEntry, wake <-chan struct{}) error {
	wait := backoff.New(o.opts.Backoff, o.opts.MaxBackoff)
	ready := func() bool { return len(o.inflight) <= left && (next == nil || o.room(next)) }
	dest := ""
	if next != nil {
		dest = next.Subject
	}
	for {
		// What is settled already first: an entry acknowledged behind one still in
		// flight may be all that has to leave.
		if o.collect(ctx, -1, "", nil); ready() {
			return nil
		}
		if err := o.collect(ctx, left, dest, wake); err != nil {
			return err
		}
		if ready() {
			return nil
		}
		// Only failures are left to send again: after a pause.
		switch woken, err := wait.WaitOr(ctx, wake); {
		case err != nil:
			return err
		case woken:
			return errWoken
		}
		o.resend(ctx)
	}
}

// collect settles the entries in flight: stored ones are reported by Published, failed
// ones are marked to be sent again (or replaced, when the failure is permanent). It
// blocks on each entry in turn, oldest first, while more than left (≥ 0) are unsettled,
// and on the oldest entry to dest (unless empty), so publishing goes on while the
// oldest acknowledgements come in; errWoken once wake is ready while it blocks. It then
// finds each window's oldest entry.
func (o *Outbox) collect(ctx context.Context, left int, dest string, wake <-chan struct{}) error {
	keep := o.inflight[:0]
	for i := range o.inflight {
		f := o.inflight[i]
		oldest := dest != "" && f.dest == dest
		if oldest {
			dest = "" // the later entries to dest need not be waited for
		}
		if f.fut != nil {
			wait := oldest || (left >= 0 && len(keep)+len(o.inflight)-i > left)
			stored, failure, err := o.settle(ctx, f, wait, wake)
			if err != nil {
				keep = append(keep, o.inflight[i:]...)
				o.inflight = keep
				o.findOldest()
				return err
			}
			switch {
			case stored:
				if !o.advance(&f, f.rest) {
					o.leave(&f)
					continue
				}
				if !o.publish(ctx, &f) {
					continue
				}
			case failure != nil:
				f.fut = nil
				switch kept, replaced := o.replace(ctx, &f, failure); {
				case !kept:
					o.leave(&f)
					continue
				case !replaced:
					o.failed(failure)
				}
			}
		}
		keep = append(keep, f)
	}
	clear(o.inflight[len(keep):])
	o.inflight = keep
	o.findOldest()
	return nil
}

// findOldest sets each window's oldest place to that of its first entry in flight:
// entries are in flight in the order of their places.
func (o *Outbox) findOldest() {
	o.pass++
	for i := range o.inflight {
		if f := &o.inflight[i]; f.w.pass != o.pass {
			f.w.oldest, f.w.oldestAt, f.w.oldestHoles, f.w.pass = f.place, f.at, f.holes, o.pass
		}
	}
}

// resend publishes again every entry marked as failed.
func (o *Outbox) resend(ctx context.Context) {
	keep := o.inflight[:0]
	for i := range o.inflight {
		f := &o.inflight[i]
		if f.fut == nil && !o.publish(ctx, f) {
			continue
		}
		keep = append(keep, *f)
	}
	clear(o.inflight[len(keep):])
	o.inflight = keep
	o.findOldest()
}

// publish sends f once; a failure marks it to be sent again. A client whose buffer of
// pending publishes is full makes it wait, which is not a failure. It reports whether f
// stays in flight: false when f was dropped (it has left its window then).
func (o *Outbox) publish(ctx context.Context, f *inflight) bool {
	for {
		msg := &nats.Msg{Subject: f.entry.Subject, Data: f.entry.Data, Header: nats.Header{jetstream.MsgIDHeader: []string{f.entry.MsgID}}}
		fut, err := o.pub.PublishMsgAsync(msg)
		f.sent = time.Now()
		switch {
		case err == nil:
			f.fut = fut
			return true
		case errors.Is(err, jetstream.ErrTooManyStalledMsgs) && ctx.Err() == nil:
			continue // the client waited for room already
		}
		f.fut = nil
		switch kept, replaced := o.replace(ctx, f, err); {
		case !kept:
			o.leave(f)
			return false
		case replaced:
			continue // what replaces it goes at once
		}
		o.failed(err)
		return true
	}
}

// replace swaps an entry that failed for good for what Permanent makes of it. It
// reports whether f is still to be sent (false: dropped and retired) and whether it was
// replaced (true: sent for the first time, not again). A replacement that fails for
// good is dropped, and the next one goes in its place.
func (o *Outbox) replace(ctx context.Context, f *inflight, err error) (keep, replaced bool) {
	if o.opts.Permanent == nil || !PermanentFailure(ctx, o.pub, f.entry.Subject, err) {
		return true, false
	}
	next := f.rest
	if f.replaced {
		o.opts.Log.Error("what replaced an outbox entry cannot be stored either: dropped", "subject", f.entry.Subject, "id", f.entry.MsgID, "err", err)
	} else {
		next = o.opts.Permanent(f.entry, err)
	}
	keep = o.advance(f, next)
	return keep, keep
}

// advance makes f the first of next, the replacements of its entry still to be sent
// (under the entry's Seq, so that storing the last one retires the entry), and reports
// whether there was one; with none left, the entry is retired: reported by Published.
func (o *Outbox) advance(f *inflight, next []delivery.OutboxEntry) bool {
	if len(next) == 0 {
		o.published = append(o.published, f.entry.Seq)
		return false
	}
	seq := f.entry.Seq
	f.entry, f.rest, f.replaced, f.fut = next[0], next[1:], true, nil
	f.entry.Seq = seq
	return true
}

// PermanentFailure reports whether err, the failure of a publish to subject through p,
// means the entry can never be stored as it is: larger than the server or the stream
// takes, or no stream captures subject (asked of p when it is a StreamFinder: the same
// answer comes from a stream that is away).
func PermanentFailure(ctx context.Context, p Publisher, subject string, err error) bool {
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, nats.ErrMaxPayload), errors.Is(err, jetstream.ErrStreamMessageExceedsMaximum),
		errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum:
		return true
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders):
		// The same answer comes from a subject no stream captures and from a stream
		// that is away (restarting, electing a leader): ask which.
		sf, ok := p.(StreamFinder)
		if !ok {
			return false
		}
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, lerr := sf.StreamNameBySubject(lctx, subject)
		return errors.Is(lerr, jetstream.ErrStreamNotFound)
	}
	return false
}

// failed counts a failed publish that is sent again (OutboxOptions.Retries) and logs it.
func (o *Outbox) failed(err error) {
	if o.opts.Retries != nil {
		o.opts.Retries.Add(1)
	}
	o.log.Failed(o.opts.Log, "outbox publish failed, will retry", err)
}

// FailureLog logs failed publishes that will be sent again: the first, and then at most
// one a second with how many failed since, rather than a line per message when NATS is
// away. The zero value is ready.
type FailureLog struct {
	failures int       // failed since the last line
	logged   time.Time // when the last line was
}

// Failed notes one failure, err, and logs msg on log if a second has passed since the
// last line.
func (l *FailureLog) Failed(log *slog.Logger, msg string, err error) {
	l.failures++
	if time.Since(l.logged) >= time.Second {
		log.Warn(msg, "failed", l.failures, "err", err)
		l.failures, l.logged = 0, time.Now()
	}
}

// settle reports whether f was stored or failed (a publish not acknowledged within
// AckTimeout has failed); without wait it does not block, and reports neither for a
// publish still in flight. Waiting, it returns errWoken once wake is ready.
func (o *Outbox) settle(ctx context.Context, f inflight, wait bool, wake <-chan struct{}) (stored bool, failure, err error) {
	left := time.Until(f.sent.Add(o.opts.AckTimeout))
	select {
	case <-f.fut.Ok():
		return true, nil, nil
	case e := <-f.fut.Err():
		return false, e, nil
	default:
		if left <= 0 {
			return false, errAckTimeout, nil
		}
		if !wait {
			return false, nil, nil
		}
	}
	timer := time.NewTimer(left)
	defer timer.Stop()
	select {
	case <-f.fut.Ok():
		return true, nil, nil
	case e := <-f.fut.Err():
		return false, e, nil
	case <-timer.C:
		return false, errAckTimeout, nil
	case <-ctx.Done():
		return false, nil, ctx.Err()
	case <-wake:
		return false, nil, errWoken
	}
}
