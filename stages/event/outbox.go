package event

import (
	"context"
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

type inflight struct {
	entry cold.OutboxEntry
	fut   jetstream.PubAckFuture // nil: to be sent (again)
}

// send publishes committed outbox entries without waiting for their acks.
func (s *Stage) send(entries []cold.OutboxEntry) {
	for _, e := range entries {
		s.inflight = append(s.inflight, inflight{entry: e, fut: s.sendOne(e)})
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

func (s *Stage) retry(err error) {
	s.stats.Retries.Add(1)
	s.log.Warn("outbox publish failed, will retry", "err", err)
}

// reap collects acknowledgements; acknowledged entries are deleted from the outbox in the
// next transaction. With wait it returns only when every entry is stored, re-sending
// failures with backoff, or when ctx ends (the entries then stay in the outbox and are
// re-sent at the next start).
func (s *Stage) reap(ctx context.Context, wait bool) error {
	backoff := 50 * time.Millisecond
	for {
		keep := s.inflight[:0]
		for _, f := range s.inflight {
			if f.fut != nil {
				var done <-chan struct{}
				if wait {
					done = ctx.Done()
				}
				select {
				case <-f.fut.Ok():
					s.published = append(s.published, f.entry.Seq)
					continue
				case err := <-f.fut.Err():
					s.retry(err)
					f.fut = nil
				case <-done:
					return ctx.Err()
				default:
					if wait {
						select {
						case <-f.fut.Ok():
							s.published = append(s.published, f.entry.Seq)
							continue
						case err := <-f.fut.Err():
							s.retry(err)
							f.fut = nil
						case <-ctx.Done():
							return ctx.Err()
						}
					}
				}
			}
			keep = append(keep, f)
		}
		s.inflight = keep
		resend := false
		for _, f := range s.inflight {
			resend = resend || f.fut == nil
		}
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
				s.inflight[i].fut = s.sendOne(s.inflight[i].entry)
			}
		}
		if !wait || len(s.inflight) == 0 {
			return nil
		}
	}
}
