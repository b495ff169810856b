package query

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/tally-dev/tally/pipeline"
)

// gather asks the partitions of ids for their values, in parallel: the partitions
// registered here through local, the others through remote, which says when a standby
// answered (stale), as counts describes. It serves counts and window changes alike.
func gather[T uint64 | int64](s *Server, ctx context.Context, fam pipeline.Family, ids []pipeline.ID,
	local func(o Partition, ids []uint64, out [][]T) error,
	remote func(p int, ids []uint64, out [][]T) (*pipeline.Stale, error)) (values [][]T, unavailable []pipeline.ID, stale []pipeline.Stale, err error) {
	if len(ids) == 0 {
		return nil, nil, nil, fmt.Errorf("%w: ids is empty", pipeline.ErrBadRequest)
	}
	if len(ids) > pipeline.MaxQueryIDs {
		return nil, nil, nil, fmt.Errorf("%w: %d ids, at most %d per request", pipeline.ErrBadRequest, len(ids), pipeline.MaxQueryIDs)
	}
	owners := (*s.owners.Load())[fam.Name]
	if len(owners) != s.cfg.Partitions {
		return nil, nil, nil, fmt.Errorf("family %s is not served here", fam.Name)
	}
	nf := len(fam.Fields)
	flat := make([]T, len(ids)*nf)
	out := make([][]T, len(ids))
	type part struct {
		ids   []uint64
		out   [][]T
		stale *pipeline.Stale // answered by its standby
		err   error
	}
	parts := map[int]*part{}
	for i, id := range ids {
		out[i] = flat[i*nf : (i+1)*nf : (i+1)*nf]
		p := pipeline.PartitionOf(id, s.cfg.Partitions)
		pp := parts[p]
		if pp == nil {
			pp = &part{}
			parts[p] = pp
		}
		pp.ids = append(pp.ids, uint64(id))
		pp.out = append(pp.out, out[i])
	}
	var wg sync.WaitGroup
	for p, pp := range parts {
		if o := owners[p]; o != nil {
			wg.Go(func() {
				// Unavailable here (its workers have stopped: a hand-over under way, or
				// its lease may have lapsed): asked of the process that serves it now.
				if pp.err = local(o, pp.ids, pp.out); errors.Is(pp.err, errUnavailable) {
					pp.stale, pp.err = remote(p, pp.ids, pp.out)
				}
			})
		} else {
			wg.Go(func() { pp.stale, pp.err = remote(p, pp.ids, pp.out) })
		}
	}
	wg.Wait()
	var errs []error
	for p, pp := range parts {
		if pp.err != nil {
			errs = append(errs, pp.err)
			if owners[p] != nil { // a partition of this process failed: not a hand-over
				s.log.Warn("partition query failed", "family", fam.Name, "partition", p, "err", pp.err)
			}
		}
	}
	if len(errs) == len(parts) {
		return nil, nil, nil, fmt.Errorf("%w: no partition of %s could answer: %w", errUnavailable, fam.Name, errors.Join(errs...))
	}
	byPart := map[int]int{} // partition → its entry in stale
	for i, id := range ids {
		p := pipeline.PartitionOf(id, s.cfg.Partitions)
		switch pp := parts[p]; {
		case pp.err != nil:
			out[i] = nil
			unavailable = append(unavailable, id)
		case pp.stale != nil:
			k, ok := byPart[p]
			if !ok {
				k = len(stale)
				byPart[p] = k
				stale = append(stale, pipeline.Stale{BehindMs: pp.stale.BehindMs, BehindMsgs: pp.stale.BehindMsgs})
			}
			stale[k].IDs = append(stale[k].IDs, id)
			stale[k].At = append(stale[k].At, i)
		}
	}
	if len(errs) > 0 {
		s.log.Debug("some partitions unavailable", "family", fam.Name, "ids", len(unavailable), "of", len(ids), "err", errors.Join(errs...))
	}
	return out, unavailable, stale, nil
}
