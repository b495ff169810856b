package event

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/store/cold"
)

// maxInflight bounds the outbox messages published but not yet acknowledged. Acks are
// collected while the next transactions are built, so the stage does not sit idle for a
// round trip per transaction; order does not matter because counter workers deduplicate
// by gap-free sequence, not by arrival order.
const maxInflight = 1024

// ackTimeout is how long a publish may go unacknowledged before it is sent again under
// the same message id. The client fails pending publishes when the connection drops,
// but a publish lost in a server restart without a disconnect being seen (or an ack
// lost on the way) would otherwise hold the stage forever.
var ackTimeout = 10 * time.Second

var errAckTimeout = errors.New("no acknowledgement in time")

type inflight struct {
	entry cold.OutboxEntry
	fut   jetstream.PubAckFuture // nil: to be sent (again)
	sent  time.Time
}

// send publishes committed outbox entries without waiting for their acks.
func (s *Stage) send(entries []cold.OutboxEntry) {
	for _, e := range entries {
		s.inflight = append(s.inflight, inflight{entry: e, fut: s.sendOne(e), sent: time.Now()})
	}
}

func (s *Stage) sendOne(e cold.OutboxEntry) jetstream.PubAckFuture {
	msg := &nats.Msg{Subject: e.Subject, Data: e.Data, Header: nats.Header{jetstream.MsgIDHeader: []string{e.MsgID}}}
	f, err := s.js.PublishMsgAsync(msg)
	if err != nil {
		s.retry(err)
		return nil
	}
	return f
}

// retry counts a failed publish; it logs the first and then at most one a second, with
// how many failed since, rather than a line per entry of an outbox when NATS is away.
func (s *Stage) retry(err error) {
	s.stats.Retries.Add(1)
	s.retries++
	if time.Since(s.retryLogged) >= time.Second {
		s.log.Warn("outbox publish failed, will retry", "failed", s.retries, "err", err)
		s.retries, s.retryLogged = 0, time.Now()
	}
}

// reap collects acknowledgements; acknowledged entries are deleted from the outbox in the
// next transaction. With wait it returns only when every entry is stored, re-sending
// failures with backoff, or when ctx ends (the entries then stay in the outbox and are
// re-sent at the next start).
func (s *Stage) reap(ctx context.Context, wait bool) error {
	backoff := 50 * time.Millisecond
	for {
		keep := make([]inflight, 0, len(s.inflight))
		for i, f := range s.inflight {
			if f.fut != nil {
				stored, failure, err := settle(ctx, f.fut, f.sent, wait)
				if err != nil {
					s.inflight = append(keep, s.inflight[i:]...)
					return err
				}
				if stored {
					s.published = append(s.published, f.entry.Seq)
					continue
				}
				if failure != nil {
					s.retry(failure)
					f.fut = nil
				}
			}
			keep = append(keep, f)
		}
		s.inflight = keep
		resend := slices.ContainsFunc(s.inflight, func(f inflight) bool { return f.fut == nil })
		if resend && wait {
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return ctx.Err()
			}
			backoff = min(2*backoff, 2*time.Second)
		}
		for i := range s.inflight {
			if s.inflight[i].fut == nil {
				s.inflight[i].fut, s.inflight[i].sent = s.sendOne(s.inflight[i].entry), time.Now()
			}
		}
		if !wait || len(s.inflight) == 0 {
			return nil
		}
	}
}

// settle reports whether a publish sent at sent was stored or failed (a publish not
// acknowledged within ackTimeout has failed); without wait it does not block (neither is
// then reported for a publish still in flight).
func settle(ctx context.Context, fut jetstream.PubAckFuture, sent time.Time, wait bool) (stored bool, failure, err error) {
	left := time.Until(sent.Add(ackTimeout))
	select {
	case <-fut.Ok():
		return true, nil, nil
	case e := <-fut.Err():
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
	case <-fut.Ok():
		return true, nil, nil
	case e := <-fut.Err():
		return false, e, nil
	case <-timer.C:
		return false, errAckTimeout, nil
	case <-ctx.Done():
		return false, nil, ctx.Err()
	}
}
