// Package flow is the JetStream plumbing the stages share: reading one partition's
// subject from a stored position, and publishing a set of messages until every one is
// acknowledged.
package flow

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Reader delivers the messages of one filtered subject in stream order.
type Reader struct {
	C    <-chan jetstream.Msg
	cc   jetstream.ConsumeContext
	stop context.CancelFunc
}

// Read starts an ordered consumer on stream for filter, beginning after position pos.
// Ordered consumers need no acks and no server-side durable state: the position a stage
// commits with its own state is the only truth about what it has consumed.
func Read(ctx context.Context, js jetstream.JetStream, stream, filter string, pos uint64, buffer int) (*Reader, error) {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}, DeliverPolicy: jetstream.DeliverAllPolicy}
	if pos > 0 {
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = pos + 1
	}
	cons, err := js.OrderedConsumer(ctx, stream, cfg)
	if err != nil {
		return nil, fmt.Errorf("cannot read %s from %s: %w", filter, stream, err)
	}
	ctx, stop := context.WithCancel(ctx)
	ch := make(chan jetstream.Msg, buffer)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		select {
		case ch <- m:
		case <-ctx.Done():
		}
	}, jetstream.PullMaxMessages(buffer))
	if err != nil {
		stop()
		return nil, fmt.Errorf("cannot consume %s: %w", filter, err)
	}
	return &Reader{C: ch, cc: cc, stop: stop}, nil
}

// Stop stops delivery; messages not taken from C are delivered again after a restart.
func (r *Reader) Stop() {
	r.stop()
	r.cc.Stop()
}

// Drain appends to batch every message already waiting on C, up to max in all.
func (r *Reader) Drain(batch []jetstream.Msg, max int) []jetstream.Msg {
	for len(batch) < max {
		select {
		case m := <-r.C:
			batch = append(batch, m)
		default:
			return batch
		}
	}
	return batch
}

// LastSeq returns the stream sequence of the newest message on filter (0 if none).
func LastSeq(ctx context.Context, js jetstream.JetStream, stream, filter string) (uint64, error) {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, err
	}
	m, err := st.GetLastMsgForSubject(ctx, filter)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return m.Sequence, nil
}

// Lag is how many stream sequences lie between pos and the newest message on filter.
func Lag(ctx context.Context, js jetstream.JetStream, stream, filter string, pos uint64) (uint64, error) {
	last, err := LastSeq(ctx, js, stream, filter)
	if err != nil || last <= pos {
		return 0, err
	}
	return last - pos, nil
}

// PublishAll publishes every message (each with its Nats-Msg-Id already set) and waits
// until all are stored, retrying the failed ones with backoff until ctx ends. Re-sending
// is safe: the stream drops a repeated message id.
func PublishAll(ctx context.Context, js jetstream.JetStream, msgs []*nats.Msg, onRetry func(error)) error {
	todo := msgs
	backoff := 50 * time.Millisecond
	for len(todo) > 0 {
		futures := make([]jetstream.PubAckFuture, len(todo))
		var failed []*nats.Msg
		var lastErr error
		for i, m := range todo {
			f, err := js.PublishMsgAsync(m)
			if err != nil {
				failed, lastErr = append(failed, m), err
				continue
			}
			futures[i] = f
		}
		for i, f := range futures {
			if f == nil {
				continue
			}
			select {
			case <-f.Ok():
			case err := <-f.Err():
				failed, lastErr = append(failed, todo[i]), err
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if len(failed) == 0 {
			return nil
		}
		if onRetry != nil {
			onRetry(lastErr)
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return errors.Join(ctx.Err(), lastErr)
		}
		backoff = min(2*backoff, 2*time.Second)
		todo = failed
	}
	return nil
}
