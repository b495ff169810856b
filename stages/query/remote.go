package query

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/pipeline"
)

// remote asks the process owning partition p of fam for the counters of ids. When no
// process owns the partition (no responders) it asks again for up to HandOver, and,
// unless exact, asks the partition's standby meanwhile (see askStandby): its answer is
// taken at once and returned as stale, with how far behind the standby was. It fails
// when neither answered within HandOver, when ctx ends first, or when the owner answers
// an error.
func (s *Server) remote(ctx context.Context, family string, fields []string, p int, ids []uint64, out [][]uint64, exact bool) (*pipeline.Stale, error) {
	req := pipeline.GetRequest{IDs: make([]pipeline.ID, len(ids))}
	for i, id := range ids {
		req.IDs[i] = pipeline.ID(id)
	}
	data, err := pipeline.Marshal(req, false)
	if err != nil {
		return nil, err
	}
	var stale *pipeline.Stale
	var standby func() bool
	if !exact {
		standby = func() bool {
			stale = s.askStandby(ctx, family, fields, p, ids, data, out)
			return stale != nil
		}
	}
	subj := s.cfg.Subjects.Part(family, p)
	msg, err := s.request(ctx, func() *nats.Msg { return &nats.Msg{Subject: subj, Data: data} }, standby, partPatience)
	switch {
	case stale != nil:
		return stale, nil
	case errors.Is(err, nats.ErrNoResponders):
		return nil, fmt.Errorf("partition %s/%d is owned by no process (hand-over?)", family, p)
	case err != nil:
		return nil, fmt.Errorf("partition %s/%d did not answer: %w", family, p, err)
	}
	if err := readCounts(msg.Data, family, fields, p, ids, out); err != nil {
		return nil, err
	}
	s.peers.learn(family, p, msg.Header.Get(peerHeader))
	return nil, nil
}

// readCounts checks that a partition's reply answers ids with fields and copies its
// counts into out; nothing is copied when it does not.
func readCounts(data []byte, family string, fields []string, p int, ids []uint64, out [][]uint64) error {
	var reply pipeline.GetReply
	if err := pipeline.UnmarshalReply(data, false, &reply); err != nil {
		return fmt.Errorf("partition %s/%d: cannot decode its reply: %w", family, p, err)
	}
	if reply.Error != "" {
		return fmt.Errorf("partition %s/%d answered: %s", family, p, reply.Error)
	}
	if !slices.Equal(reply.Fields, fields) || len(reply.Counts) != len(ids) {
		return fmt.Errorf("partition %s/%d answered %d ids with fields %v, want %d with %v", family, p, len(reply.Counts), reply.Fields, len(ids), fields)
	}
	for i, c := range reply.Counts {
		if len(c) != len(out[i]) {
			return fmt.Errorf("partition %s/%d answered %d fields for id %d, want %d", family, p, len(c), ids[i], len(out[i]))
		}
	}
	for i, c := range reply.Counts {
		copy(out[i], c)
	}
	return nil
}

// askStandby asks the standby of partition p of family (<prefix>.standby.<family>.<p>)
// for the counters of ids (req, encoded) and returns how far behind it was, or
// nil when no standby answered them: none is kept, it has not loaded yet, or it failed.
// ids and at of the result are left for the caller to fill.
func (s *Server) askStandby(ctx context.Context, family string, fields []string, p int, ids []uint64, req []byte, out [][]uint64) *pipeline.Stale {
	msg, err := s.nc.RequestMsgWithContext(ctx, &nats.Msg{Subject: s.cfg.Subjects.Standby(family, p), Data: req})
	if err != nil {
		return nil
	}
	var reply pipeline.GetReply
	if err := pipeline.UnmarshalReply(msg.Data, false, &reply); err != nil || reply.Error != "" || len(reply.Stale) != 1 {
		return nil // it says why itself when it has a reason (not loaded): no warning per read
	}
	if err := readCounts(msg.Data, family, fields, p, ids, out); err != nil {
		s.log.Warn("a standby answered what was not asked", "family", family, "partition", p, "err", err)
		return nil
	}
	return &pipeline.Stale{BehindMs: reply.Stale[0].BehindMs, BehindMsgs: reply.Stale[0].BehindMsgs}
}
