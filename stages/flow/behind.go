package flow

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Behind is how far a reader of one subject is behind its stream.
type Behind struct {
	// Msgs is the number of stream sequences between the reader's position and the
	// newest message on its subject: at least that many when told by a tracked reader
	// (Meter.Track), which knows of the messages stored after its last delivery only
	// as many as there were then.
	Msgs uint64
	// Age is how long ago JetStream stored the oldest message on the subject that the
	// reader has not applied yet, by the clock of the caller: 0 when it has applied
	// everything. Unlike Msgs it does not grow with the rate of a steady load, only when
	// the reader falls behind in time.
	Age time.Duration
	// Pos is the reader's position the lag was measured from: the last sequence of the
	// stream it has applied. A reader found caught up twice at the same position
	// applied nothing in between (see query.Server.Health).
	Pos uint64
}

// BehindOf tells how far a reader at position pos of filter in stream is, as of now.
// A reader caught up costs one request, whose reply holds no message; one that lags,
// two. It looks the stream up each time: what asks again and again keeps a Meter.
func BehindOf(ctx context.Context, js jetstream.JetStream, stream, filter string, pos uint64, now time.Time) (Behind, error) {
	return NewMeter(js, stream, filter).Behind(ctx, pos, now)
}

// Meter tells how far a reader of filter in stream is behind, keeping the stream's handle:
// looking a stream up asks JetStream for its whole info, the dearest of the requests a
// lag takes, and a health check or a metrics scrape asks the lag of every partition.
// The handle is looked up again after a request through it fails (the stream deleted,
// recreated or moved). Safe for concurrent use.
type Meter struct {
	js             jetstream.JetStream
	stream, filter string
	mu             sync.Mutex
	handle         jetstream.Stream
	reader         *Reader // of the reader it measures, while it tracks one
}

// Track makes the Meter tell the lag of the reader at position applied from what r
// delivered past it while it delivered some, asking the stream only
// otherwise: a lagging partition's lag then costs no request, where it cost two (a
// health check asks every partition's, twice when all are caught up; the requests'
// replies carry whole messages, batches of events, as JSON). Track(nil, nil) stops it.
func (l *Meter) Track(r *Reader, applied *atomic.Uint64) {
	if r != nil {
		r.ahead.track(applied)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reader = r
}

// NewMeter returns the Meter of a reader of filter in stream.
func NewMeter(js jetstream.JetStream, stream, filter string) *Meter {
	return &Meter{js: js, stream: stream, filter: filter}
}

// Behind tells how far a reader at position pos is, as of now (see BehindOf).
func (l *Meter) Behind(ctx context.Context, pos uint64, now time.Time) (Behind, error) {
	l.mu.Lock()
	st, r := l.handle, l.reader
	l.mu.Unlock()
	if r != nil {
		if b, ok := r.ahead.behind(pos, now); ok {
			return b, nil
		}
	}
	if st == nil {
		var err error
		if st, err = l.js.Stream(ctx, l.stream); err != nil {
			return Behind{}, err
		}
		l.mu.Lock()
		l.handle = st
		l.mu.Unlock()
	}
	b, err := behind(ctx, st, l.filter, pos, now)
	b.Pos = pos
	if err != nil {
		l.mu.Lock()
		l.handle = nil
		l.mu.Unlock()
	}
	return b, err
}

func behind(ctx context.Context, st jetstream.Stream, filter string, pos uint64, now time.Time) (Behind, error) {
	// The first message of the subject after pos (a purge may have removed some: then the
	// oldest one left, which is what is still to be applied). Asked first: none, the
	// answer of a reader caught up, is a reply without a message, where the newest
	// message, asked first before, came whole (a batch of events, as JSON).
	next, err := st.GetMsg(ctx, pos+1, jetstream.WithGetMsgSubject(filter))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Behind{}, nil
	}
	if err != nil {
		return Behind{}, err
	}
	last, err := st.GetLastMsgForSubject(ctx, filter)
	if errors.Is(err, jetstream.ErrMsgNotFound) { // purged in the meantime: nothing to apply
		return Behind{}, nil
	}
	if err != nil {
		return Behind{}, err
	}
	return Behind{Msgs: max(last.Sequence, next.Sequence) - pos, Age: max(now.Sub(next.Time), 0)}, nil // a NATS clock ahead of ours is not a lag
}
