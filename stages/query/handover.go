package query

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// DefaultHandOver is how long a request waits out a partition's hand-over (see
// Config.HandOver): a partition handed to a warm standby is served again within a few
// hundred milliseconds on a quiet machine, and took 1.2 s in a rejoin while the joining
// process primed its standbys (1 s failed that read); a restore takes longer and is
// answered unavailable. Within the request timeout (5 s), as within a client's.
const DefaultHandOver = 2 * time.Second

// goneHeader marks the reply of a process that no longer holds the partition asked
// (errGone): the asker takes it as no responders.
const goneHeader = "Tally-Gone"

// request sends the message msg makes and, while no process serves its partition (a
// hand-over: one process has stopped it, the next has not started it yet), sends it
// again until HandOver has passed or ctx ends, so that a read waits out a hand-over
// rather than fail. A reply from a process that has just stopped it (goneHeader: the
// request was queued there, or came as its subscription drained) is a hand-over too:
// it was answered unavailable at once (TestGetWaitsOutHandOver failed 1 run in 20-40).
// Each time no process serves it, meanwhile (when set) is called, and when that
// answered the read (true), request returns no message and no error; after HandOver, a
// gone reply is returned as it is.
func (s *Server) request(ctx context.Context, msg func() *nats.Msg, meanwhile func() bool, patience time.Duration) (*nats.Msg, error) {
	deadline := time.Now().Add(s.cfg.HandOver)
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		m, err := s.ask(ctx, msg, patience)
		gone := err == nil && m.Header.Get(goneHeader) != ""
		if !gone && !errors.Is(err, nats.ErrNoResponders) {
			return m, err
		}
		if meanwhile != nil && meanwhile() {
			return nil, nil
		}
		if time.Now().Add(wait).After(deadline) {
			return m, err
		}
		select {
		case <-ctx.Done():
			return m, err // no message, or the gone reply
		case <-time.After(wait):
		}
	}
}

// partPatience is how long a read of a partition waits for its answer before it sends
// the request once more (see ask): an owner answers within a millisecond or so, and a
// request lost inside NATS — routed to a server as it stopped, or answered through it —
// is never answered. A read of a partition waited out the whole of its time then
// (TestLostPartRequestAskedAgain).
const partPatience = 250 * time.Millisecond

// ask sends the message msg makes and returns its answer. When patience is not 0, one
// not answered within it is sent once more — a read, which asking twice changes
// nothing — and the rest of ctx waited for the answer to that: an owner merely slow
// (a checkpoint, cold reads) answers the second.
func (s *Server) ask(ctx context.Context, msg func() *nats.Msg, patience time.Duration) (*nats.Msg, error) {
	if patience > 0 {
		pctx, cancel := context.WithTimeout(ctx, patience)
		m, err := s.nc.RequestMsgWithContext(pctx, msg())
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
			return m, err
		}
	}
	return s.nc.RequestMsgWithContext(ctx, msg())
}

// goneIfUnavailable marks err gone when it says the partition is unavailable here: a
// partition answered by workers that have stopped (handed over) or whose lease may have
// lapsed is another process's to answer, and the asker asks again (see request).
func goneIfUnavailable(err error) error {
	if errors.Is(err, errUnavailable) && !errors.Is(err, errGone) {
		return fmt.Errorf("%w: %w", err, errGone)
	}
	return err
}
