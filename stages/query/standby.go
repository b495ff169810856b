package query

import (
	"context"
	"fmt"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/stages/flow"
)

// Standby is a copy of a counter partition that another process owns, kept here to take
// it over (a counter worker of a standby). While no process owns the partition — its
// owner was killed and the standby has not taken it over yet — a get is answered from
// it rather than not at all, marked stale (see pipeline.GetReply.Stale).
type Standby interface {
	// Ready reports whether it has loaded its state.
	Ready() bool
	// Stale fills out like Partition.Get from the state applied so far, and says how far
	// behind its stream that state is.
	Stale(ctx context.Context, ids []uint64, out [][]uint64) (flow.Behind, error)
}

// StandbyQueueGroup is the queue group of the <prefix>.standby.<family>.<p>
// subscriptions: the processes keeping a standby of a partition (one, or two while a
// move is planned) share them.
const StandbyQueueGroup = "tally-standby"

// SetStandby registers sb as a standby of partition p of family kept in this process,
// served on <prefix>.standby.<family>.<p> while the server is started, in place of any
// registered before. DropStandby removes it.
func (s *Server) SetStandby(family string, p int, sb Standby) {
	key := partKey{family, p}
	s.mu.Lock()
	defer s.mu.Unlock()
	if sub, ok := s.sbSubs[key]; ok {
		s.release(sub)
		delete(s.sbSubs, key)
	}
	s.standbys[key] = sb
	if s.started {
		if err := s.subscribeStandby(key, sb); err != nil {
			s.log.Warn("cannot serve a standby's reads", "family", family, "partition", p, "err", err)
		}
	}
}

// DropStandby stops serving sb as the standby of partition p of family: it is stopped,
// or it has taken the partition over. A standby registered in its place since stays.
func (s *Server) DropStandby(family string, p int, sb Standby) {
	key := partKey{family, p}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.standbys[key] != sb {
		return
	}
	delete(s.standbys, key)
	if sub, ok := s.sbSubs[key]; ok {
		s.release(sub)
		delete(s.sbSubs, key)
	}
}

// subscribeStandby serves sb's reads to every process; s.mu is held.
func (s *Server) subscribeStandby(key partKey, sb Standby) error {
	subj := s.cfg.Subjects.Standby(key.family, key.p)
	sub, err := s.nc.QueueSubscribe(subj, StandbyQueueGroup, s.handle("standby", s.standby(key, sb)))
	if err != nil {
		return fmt.Errorf("cannot subscribe %s: %w", subj, err)
	}
	s.sbSubs[key] = sub
	return nil
}

// standby answers <prefix>.standby.<family>.<p> from sb: the counts it has applied,
// every id of the reply in its one Stale entry with how far behind it is.
func (s *Server) standby(key partKey, sb Standby) func(*request) (any, error) {
	fam, _ := s.cfg.Families.Lookup(key.family)
	return func(r *request) (any, error) {
		if !sb.Ready() {
			return nil, fmt.Errorf("%w: the standby of %s/%d has not loaded yet", errUnavailable, key.family, key.p)
		}
		req, ids, out, err := s.partRequest(r, key, len(fam.Fields))
		if err != nil {
			return nil, err
		}
		b, err := sb.Stale(r.ctx, ids, out)
		if err != nil {
			return nil, err
		}
		at := make([]int, len(ids))
		for i := range at {
			at[i] = i
		}
		// Rounded up: a standby a moment behind is never said to be exact.
		ms := (b.Age.Nanoseconds() + 999_999) / 1_000_000
		return pipeline.GetReply{Fields: fam.Fields, Estimated: fam.Estimated(), Counts: out, Stale: []pipeline.Stale{{IDs: req.IDs, At: at, BehindMs: ms, BehindMsgs: b.Msgs}}}, nil
	}
}
