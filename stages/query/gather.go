package query

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/tally-dev/tally/pipeline"
)

// gather asks the partitions of ids for their values, local ones through local and the
// others through remote, as counts describes.
func gather[T uint64 | int64](s *Server, ctx context.Context, fam pipeline.Family, ids []pipeline.ID,
	local func(o Partition, ids []uint64, out [][]T) error, remote func(p int, ids []uint64, out [][]T) error) (counts [][]T, unavailable []pipeline.ID, err error) {
	if len(ids) == 0 {
		return nil, nil, fmt.Errorf("%w: ids is empty", pipeline.ErrBadRequest)
	}
	if len(ids) > pipeline.MaxQueryIDs {
		return nil, nil, fmt.Errorf("%w: %d ids, at most %d per request", pipeline.ErrBadRequest, len(ids), pipeline.MaxQueryIDs)
	}
	owners := (*s.owners.Load())[fam.Name]
	if len(owners) != s.cfg.Partitions {
		return nil, nil, fmt.Errorf("family %s is not served here", fam.Name)
	}
	nf := len(fam.Fields)
	flat := make([]T, len(ids)*nf)
	out := make([][]T, len(ids))
	type part struct {
		ids []uint64
		out [][]T
		err error
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
			wg.Go(func() { pp.err = local(o, pp.ids, pp.out) })
		} else {
			wg.Go(func() { pp.err = remote(p, pp.ids, pp.out) })
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
	if len(errs) == 0 {
		return out, nil, nil
	}
	if len(errs) == len(parts) {
		return nil, nil, fmt.Errorf("%w: no partition of %s could answer: %w", errUnavailable, fam.Name, errors.Join(errs...))
	}
	for i, id := range ids {
		if parts[pipeline.PartitionOf(id, s.cfg.Partitions)].err != nil {
			out[i] = nil
			unavailable = append(unavailable, id)
		}
	}
	s.log.Debug("some partitions unavailable", "family", fam.Name, "ids", len(unavailable), "of", len(ids), "err", errors.Join(errs...))
	return out, unavailable, nil
}
