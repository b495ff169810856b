package client

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline"
)

// Change is a change event as Changes yields it: the new values, and its place in the
// changes stream, from which a watcher that stopped resumes (FromSequence(Seq+1)).
type Change struct {
	pipeline.Change
	Seq    uint64    // its sequence in the changes stream
	Stored time.Time // when JetStream stored it
}

// WatchOption says where Changes starts; by default, with the next change event.
type WatchOption func(*jetstream.OrderedConsumerConfig) error

// FromSequence starts with the change event at sequence seq of the changes stream, or
// the first after it that is of the family: the Seq of the last one handled plus one
// resumes where a watcher stopped. The stream keeps change events for a while only
// (pipeline.StreamConfig); one older than that is gone.
func FromSequence(seq uint64) WatchOption {
	return func(cfg *jetstream.OrderedConsumerConfig) error {
		if seq == 0 {
			return fmt.Errorf("%w: stream sequences start at 1", ErrBadRequest)
		}
		cfg.DeliverPolicy, cfg.OptStartSeq, cfg.OptStartTime = jetstream.DeliverByStartSequencePolicy, seq, nil
		return nil
	}
}

// FromTime starts with the first change event stored at or after t.
func FromTime(t time.Time) WatchOption {
	return func(cfg *jetstream.OrderedConsumerConfig) error {
		cfg.DeliverPolicy, cfg.OptStartTime, cfg.OptStartSeq = jetstream.DeliverByStartTimePolicy, &t, 0
		return nil
	}
}

// Changes yields the change events of family in the changes stream's order, from the
// next one on or where an option says, until ctx ends (which is no error) or the caller
// stops. Nothing is dropped silently: a message that does not decode is yielded as an
// error wrapping ErrBadChange, with its place in Change.Seq, and the iteration goes on
// if the caller goes on; a consumer that cannot be set up or fails is yielded as an
// error that ends the iteration (resume with FromSequence). A slow caller slows
// delivery, it loses nothing.
//
//	for ch, err := range c.Changes(ctx, "post", client.FromSequence(last+1)) {
//		if err != nil { log(err); continue }
//		mirror(ch); last = ch.Seq
//	}
func (c *Client) Changes(ctx context.Context, family string, opts ...WatchOption) iter.Seq2[Change, error] {
	return func(yield func(Change, error) bool) {
		it, err := c.consume(ctx, family, opts)
		switch {
		case ctx.Err() != nil:
			if it != nil {
				it.Stop()
			}
		case err != nil:
			yield(Change{}, err)
		default:
			each(ctx, family, it, yield)
		}
	}
}

// each yields what it delivers until ctx ends, yield returns false or it fails; it is
// stopped on return.
func each(ctx context.Context, family string, it jetstream.MessagesContext, yield func(Change, error) bool) {
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
		case <-done:
		}
		it.Stop() // ends a Next waiting for a message
	}()
	for {
		m, err := it.Next()
		switch {
		case ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed):
			return
		case err != nil:
			yield(Change{}, fmt.Errorf("watching %s: %w", family, err))
			return
		}
		var ch Change
		if md, err := m.Metadata(); err == nil {
			ch.Seq, ch.Stored = md.Sequence.Stream, md.Timestamp
		}
		var bad error
		if err := pipeline.UnmarshalReply(m.Data(), false, &ch.Change); err != nil {
			bad = fmt.Errorf("%w: %s at sequence %d: %w", ErrBadChange, m.Subject(), ch.Seq, err)
			ch.Change = pipeline.Change{}
		}
		if !yield(ch, bad) {
			return
		}
	}
}

// consume starts an ordered consumer of family's change events.
func (c *Client) consume(ctx context.Context, family string, opts []WatchOption) (jetstream.MessagesContext, error) {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{c.subj.Changes(family)}, DeliverPolicy: jetstream.DeliverNewPolicy}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	cons, err := c.js.OrderedConsumer(ctx, c.subj.ChangesStream(), cfg)
	if err != nil {
		return nil, fmt.Errorf("cannot watch %s: %w", family, err)
	}
	it, err := cons.Messages(jetstream.PullMaxBytes(c.pullBytes()))
	if err != nil {
		return nil, fmt.Errorf("cannot watch %s: %w", family, err)
	}
	return it, nil
}

// pullBytes is what a watcher pulls at most: the largest payload its connection takes
// (so that any change event comes), 1 MiB at least. Counted in messages, as nats.go
// does by default (500), a watcher behind a backlog of change events of 4 096 ids pulled
// ~75 MB, past the 64 MiB a server queues for one connection (max_pending), and was cut
// off as a slow consumer whenever it read slower than the server wrote.
func (c *Client) pullBytes() int {
	return int(max(c.nc.MaxPayload(), 1<<20))
}

// Watch delivers the change events of family from now on until ctx ends; the channel is
// closed then, or when the consumer fails. A slow reader slows delivery, it loses
// nothing — but it drops a message that does not decode, and cannot resume: Changes
// yields those as errors and starts where it is told.
func (c *Client) Watch(ctx context.Context, family string) (<-chan pipeline.Change, error) {
	it, err := c.consume(ctx, family, nil)
	if err != nil {
		return nil, err
	}
	out := make(chan pipeline.Change, 64)
	go func() {
		defer close(out)
		each(ctx, family, it, func(ch Change, err error) bool {
			if err != nil {
				return errors.Is(err, ErrBadChange)
			}
			select {
			case out <- ch.Change:
				return true
			case <-ctx.Done():
				return false
			}
		})
	}()
	return out, nil
}
