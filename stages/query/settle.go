package query

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/stages/flow"
)

// positioned is a counter partition that tells the last sequence of its deltas stream
// it has applied (a counter.Worker in this process).
type positioned interface{ Position() uint64 }

// settle waits, up to settleWait, until the counters and the relations of the groups'
// ids both hold everything the event stages had committed when it was called, and says,
// per group and id, why one is not settled ("" once it is). It needs no instant at which
// the partitions are idle, which a steady load would rarely offer. It waits for three
// things, each asked of the partition here or of its owner on its part.ev subject:
//
//   - every event stage has published what it had committed (see stageSettled): done
//     once every outbox entry it had written when settle began is acknowledged (as its
//     next transaction finds: Stage.Outbox), or once it is seen caught up (idle, nothing
//     unacknowledged). Until all are, no id is settled: any stage may
//     hold a delta of any id. A partition owned by no process is not done.
//   - then each id's counter partition: done once it has applied its deltas stream up to
//     the last sequence stored by then, or, owned by another process, once it is seen
//     caught up.
//   - for a user, every hop batch that each other partition had sent, when settle began,
//     to the user's partition is applied there (hopsApplied). A follow changes the
//     follower's following list and both counters in the follower's partition, but the
//     followed user's follower list only where the hop carrying it is applied: acknowledged
//     is not applied, and a partition behind on its stream leaves it in flight for as long
//     as it lags. Posts need no such wait: a like or a comment changes its relation and
//     makes its delta in one transaction of the user's partition (one that came in another
//     partition's batch is handed there first, and until then neither has changed); the
//     owner's notification it hands on is not audited.
func (s *Server) settle(ctx context.Context, groups []*audited) ([][]string, error) {
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
	hops := &hopWait{} // the event partitions of the users, whose follower lists hops change
	for _, g := range groups {
		for _, id := range g.ids {
			pt := &partWait{family: g.fam.Name, p: pipeline.PartitionOf(id, s.cfg.Partitions)}
			if !slices.ContainsFunc(parts, func(o *partWait) bool { return *o == *pt }) {
				parts = append(parts, pt)
			}
			if g.fam.Name == pipeline.FamilyUser && !slices.Contains(hops.left, pt.p) {
				hops.left = append(hops.left, pt.p)
			}
		}
	}
	if len(hops.left) > 0 {
		hops.sent = make([]map[uint32]uint64, s.cfg.Partitions)
		hops.applied = make([]map[uint32]uint64, s.cfg.Partitions)
		hops.known = make([]bool, s.cfg.Partitions)
	}
	stagesDone := false
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
		s.askHops(askCtx, hops, &wg)
		wg.Wait()
		hops.settle()
		// The counters only once every stage is done: then what the stages had
		// committed is in the deltas stream.
		if stagesDone = !slices.ContainsFunc(stages, func(r *evRequest) bool { return r != nil }); stagesDone {
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
				return nil, err
			}
		}
		if stagesDone && len(parts) == 0 && len(hops.left) == 0 || time.Now().After(deadline) || !pause(ctx, settlePoll) {
			break
		}
	}
	why := make([][]string, len(groups))
	for k, g := range groups {
		why[k] = make([]string, len(g.ids))
		for j, id := range g.ids {
			p := pipeline.PartitionOf(id, s.cfg.Partitions)
			switch {
			case !stagesDone || slices.ContainsFunc(parts, func(pt *partWait) bool { return pt.family == g.fam.Name && pt.p == p }):
				why[k][j] = skipLagging
			case g.fam.Name == pipeline.FamilyUser && slices.Contains(hops.left, p):
				why[k][j] = skipInFlight
			}
		}
	}
	return why, nil
}

// hopWait is what a settle waits for of the hop batches: that each event partition in
// left has applied what every other had sent to it when the settle began (sent[p], read
// once, known[p] once it is; applied[p] is what p last said it had applied).
type hopWait struct {
	left    []int
	sent    []map[uint32]uint64
	applied []map[uint32]uint64
	known   []bool
}

// askHops asks on wg, while hops are waited for, each partition once: what it has sent
// to the others, until that is known, and what it has applied of theirs, while it is
// waited for (an owner that does not answer, or does not know the question, is asked
// again at the next poll). Each asking writes only its own partition's entries.
func (s *Server) askHops(ctx context.Context, hops *hopWait, wg *sync.WaitGroup) {
	if len(hops.left) == 0 {
		return
	}
	for p, known := range hops.known {
		waited := slices.Contains(hops.left, p)
		if known && !waited {
			continue
		}
		wg.Go(func() {
			r, err := s.ev(ctx, p, evHops, &evRequest{})
			if err != nil {
				return
			}
			if !known {
				hops.sent[p], hops.known[p] = r.Sent, true
			}
			if waited {
				hops.applied[p] = r.Applied
				if r.Applied == nil { // nothing applied yet, but asked
					hops.applied[p] = map[uint32]uint64{}
				}
			}
		})
	}
}

// settle removes from left each partition that has applied every hop batch the others
// had sent to it, once what they had sent is known. (What a partition applied may have
// been read before what another sent: both only grow, so that is stricter, never laxer.)
func (hops *hopWait) settle() {
	if len(hops.left) == 0 || slices.Contains(hops.known, false) {
		return
	}
	hops.left = slices.DeleteFunc(hops.left, func(q int) bool {
		if hops.applied[q] == nil {
			return false // not asked yet
		}
		for src, sent := range hops.sent {
			if src != q && sent[uint32(q)] > hops.applied[q][uint32(src)] {
				return false
			}
		}
		return true
	})
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
	return pipeline.UnmarshalReply(m.Data, false, &h) == nil && h.Error == "" && h.OK
}

// stageSettled answers a settle of event partition p, registered here with stage st:
// the last outbox entry its stage has written (the one to wait for, when req does not
// say it already), and whether it is acknowledged, or the stage is caught up.
func (s *Server) stageSettled(ctx context.Context, p int, st Stage, req *evRequest) (*evReply, error) {
	last, oldest := st.Outbox()
	if req.HasLast {
		last = req.Last
	}
	done := oldest > last
	if !done {
		b, err := st.Behind(ctx)
		done = err == nil && b.Msgs == 0
	}
	return &evReply{Last: last, Done: done}, nil
}

// pause waits d, or until ctx ends; it reports whether ctx is still live.
func pause(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}
