package query

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
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
// load would rarely offer. First each event stage: done once every outbox entry it had
// written when settle began is acknowledged (the entries are deleted from Badger in its
// next transaction), or once it is seen caught up (idle, nothing unacknowledged) — then
// what it had committed is in the streams. Then each counter partition: done once it has
// applied its deltas stream up to the last sequence stored by then, or, owned by another
// process, once it is seen caught up.
func (s *Server) settle(ctx context.Context, groups []*audited) (bool, error) {
	type stageWait struct {
		name string
		p    int
		last uint64 // the last outbox entry written when settle began
	}
	var stages []stageWait
	laggers := s.eventStages()
	for name := range laggers {
		w := stageWait{name: name, p: -1, last: math.MaxUint64}
		if p, err := strconv.Atoi(strings.TrimPrefix(name, "event.")); err == nil {
			last, _, err := cold.StageOutbox(s.db, p)
			if err != nil {
				return false, fmt.Errorf("cannot read the outbox of event partition %d: %w", p, err)
			}
			w.p, w.last = p, last
		}
		stages = append(stages, w)
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
	deadline := time.Now().Add(settleWait)
	for {
		stages = slices.DeleteFunc(stages, func(w stageWait) bool {
			if w.p >= 0 {
				if _, oldest, err := cold.StageOutbox(s.db, w.p); err == nil && (oldest == 0 || oldest > w.last) {
					return true
				}
			}
			b, err := laggers[w.name].Behind(ctx)
			return err == nil && b.Msgs == 0
		})
		// The counters only once every stage is done: then what the stages had
		// committed is in the deltas stream.
		if len(stages) == 0 {
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
