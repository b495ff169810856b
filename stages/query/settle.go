package query

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/stages/flow"
	"github.com/tally-dev/tally/store/cold"
)

// positioned is a counter partition that tells the last sequence of its deltas stream
// it has applied (a counter.Worker in this process).
type positioned interface{ Position() uint64 }

// settle waits, up to settleWait, until everything the event stages had committed when
// it was called is applied by the counter partitions of the groups' ids; it reports
// whether it is. It needs no instant at which the partitions are idle, which a steady
// load would rarely offer. First every event partition, here or asked of its owner on
// its part.ev subject (see stageSettled): done once every outbox entry its stage had
// written when settle began is acknowledged (the entries are deleted from Badger in its
// next transaction), or once it is seen caught up (idle, nothing unacknowledged) — then
// what it had committed is in the streams. A partition owned by no process is not done.
// Then each counter partition: done once it has applied its deltas stream up to the last
// sequence stored by then, or, owned by another process, once it is seen caught up.
func (s *Server) settle(ctx context.Context, groups []*audited) (bool, error) {
	deadline := time.Now().Add(settleWait)
	// Each poll's asks end by the deadline: an owner that does not answer is waited for
	// no longer than a lagging one.
	askCtx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	stages := make([]*evRequest, s.cfg.Partitions) // nil once done
	for p := range stages {
		stages[p] = &evRequest{}
	}
	type partWait struct {
		family string
		p      int
		target uint64 // deltas stream sequence to reach; 0 until the stages are done
	}
	var parts []*partWait
	for _, g := range groups {
		for _, id := range g.ids {
			pt := &partWait{family: g.fam.Name, p: pipeline.PartitionOf(id, s.cfg.Partitions)}
			if !slices.ContainsFunc(parts, func(o *partWait) bool { return *o == *pt }) {
				parts = append(parts, pt)
			}
		}
	}
	for {
		var wg sync.WaitGroup
		for p, req := range stages {
			if req == nil {
				continue
			}
			wg.Go(func() {
				r, err := s.ev(askCtx, p, evSettle, req)
				switch {
				case err != nil: // not done: asked again at the next poll
				case r.Done:
					stages[p] = nil
				case !req.HasLast: // the entry to wait for, as this stage tells it
					stages[p] = &evRequest{Last: r.Last, HasLast: true}
				}
			})
		}
		wg.Wait()
		// The counters only once every stage is done: then what the stages had
		// committed is in the deltas stream.
		if !slices.ContainsFunc(stages, func(r *evRequest) bool { return r != nil }) {
			var err error
			parts = slices.DeleteFunc(parts, func(pt *partWait) bool {
				if err != nil {
					return false
				}
				var done bool
				done, err = s.counterSettled(ctx, pt.family, pt.p, &pt.target)
				return done
			})
			if err != nil {
				return false, err
			}
			if len(parts) == 0 {
				return true, nil
			}
		}
		if time.Now().After(deadline) {
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, nil
		case <-time.After(settlePoll):
		}
	}
}

// counterSettled reports whether counter partition family/p has applied its deltas
// stream up to *target, the last sequence stored on its subject when first called (set
// then), when the partition is here; otherwise whether it is caught up.
func (s *Server) counterSettled(ctx context.Context, family string, p int, target *uint64) (bool, error) {
	o := (*s.owners.Load())[family][p]
	pos, ok := o.(positioned)
	if !ok {
		return s.counterCaughtUp(ctx, family, p), nil
	}
	if *target == 0 {
		js, err := s.jetStream()
		if err != nil {
			return false, err
		}
		last, err := flow.LastSeq(ctx, js, s.cfg.Subjects.DeltasStream(), s.cfg.Subjects.Delta(family, p))
		if err != nil {
			return false, nil // NATS did not answer: try again at the next poll
		}
		*target = max(last, 1) // 1: nothing stored yet, and a position is never below 1 once applied
		if last == 0 {
			return true, nil
		}
	}
	return o.Ready() && pos.Position() >= *target, nil
}

// counterCaughtUp reports whether counter partition family/p has applied all of its
// deltas, asking its owner when it is not here; a partition nobody answers for is not.
func (s *Server) counterCaughtUp(ctx context.Context, family string, p int) bool {
	if o := (*s.owners.Load())[family][p]; o != nil {
		b, err := o.Behind(ctx)
		return err == nil && o.Ready() && b.Msgs == 0
	}
	msg := nats.NewMsg(s.cfg.Subjects.Part(family, p))
	msg.Header.Set(lagHeader, MaxLag{}.String()) // the strictest: everything applied
	m, err := s.nc.RequestMsgWithContext(ctx, msg)
	if err != nil {
		return false
	}
	var h pipeline.HealthReply
	return pipeline.Unmarshal(m.Data, false, &h) == nil && h.Error == "" && h.OK
}

// stageSettled answers a settle of event partition p, registered here with stage st:
// the last outbox entry its stage has written (the one to wait for, when req does not
// say it already), and whether it is acknowledged, or the stage is caught up.
func (s *Server) stageSettled(ctx context.Context, p int, st Stage, req *evRequest) (*evReply, error) {
	last, oldest, err := cold.StageOutbox(s.db, p)
	if err != nil {
		return nil, fmt.Errorf("cannot read the outbox of event partition %d: %w", p, err)
	}
	if req.HasLast {
		last = req.Last
	}
	done := oldest == 0 || oldest > last
	if !done {
		b, err := st.Behind(ctx)
		done = err == nil && b.Msgs == 0
	}
	return &evReply{Last: last, Done: done}, nil
}
