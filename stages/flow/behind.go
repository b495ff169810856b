package flow

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Behind is how far a reader of one subject is behind its stream.
type Behind struct {
	// Msgs is the number of stream sequences between the reader's position and the
	// newest message on its subject.
	Msgs uint64
	// Age is how long ago JetStream stored the oldest message on the subject that the
	// reader has not applied yet, by the clock of the caller: 0 when it has applied
	// everything. Unlike Msgs it does not grow with the rate of a steady load, only when
	// the reader falls behind in time.
	Age time.Duration
}

// BehindOf tells how far a reader at position pos of filter in stream is, as of now.
// Age costs one more request, made only when the reader lags.
func BehindOf(ctx context.Context, js jetstream.JetStream, stream, filter string, pos uint64, now time.Time) (Behind, error) {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return Behind{}, err
	}
	last, err := st.GetLastMsgForSubject(ctx, filter)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Behind{}, nil
	}
	if err != nil {
		return Behind{}, err
	}
	if last.Sequence <= pos {
		return Behind{}, nil
	}
	b := Behind{Msgs: last.Sequence - pos}
	// The first message of the subject after pos (a purge may have removed some: then the
	// oldest one left, which is what is still to be applied).
	next, err := st.GetMsg(ctx, pos+1, jetstream.WithGetMsgSubject(filter))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		// Applied in the meantime.
	case err != nil:
		return Behind{}, err
	default:
		b.Age = max(now.Sub(next.Time), 0) // a NATS clock ahead of ours is not a lag
	}
	return b, nil
}
