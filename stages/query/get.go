package query

import (
	"context"
	"fmt"
	"strings"

	"github.com/tally-dev/tally/pipeline"
)

// get answers <prefix>.get.<family>: the counters of ids gathered from their partitions
// (counts), or a window's changes (getWindow); asked with pipeline.WhereHeader, it names
// where the family's partitions are served (where.go).
func (s *Server) get(r *request) (any, error) {
	fam, req, err := s.getRequest(r, strings.TrimPrefix(r.msg.Subject, s.cfg.Subjects.Prefix+".get."))
	if err != nil {
		return nil, err
	}
	if req.Window != "" { // answered by owners only: a windowed get is never stale
		return s.getWindow(r.ctx, fam, &req)
	}
	if r.msg.Header.Get(pipeline.WhereHeader) != "" {
		r.setHeader(pipeline.WhereHeader, s.where(fam.Name).String())
	}
	counts, unavailable, stale, err := s.counts(r.ctx, fam, req.IDs, req.Exact)
	if err != nil {
		return nil, err
	}
	return pipeline.GetReply{Fields: fam.Fields, Estimated: fam.Estimated(), Counts: counts, Unavailable: unavailable, Stale: stale}, nil
}

// getRequest reads r, a get of the ids of family.
func (s *Server) getRequest(r *request, family string) (pipeline.Family, pipeline.GetRequest, error) {
	var req pipeline.GetRequest
	fam, err := s.cfg.Families.Lookup(family)
	if err == nil {
		err = r.decode(&req)
	}
	return fam, req, err
}

// errUnavailable marks an answer withheld because a partition is not here or did not
// answer: a hand-over, not a failure worth a warning per request. Its replies carry
// pipeline.CodeUnavailable.
var errUnavailable = pipeline.ErrUnavailable

// part answers <prefix>.part.<family>.<p> from the partition registered here, for the
// counts of another process. A partition unavailable here (its workers have stopped, or
// its lease may have lapsed) is answered gone, which the asker asks again elsewhere.
func (s *Server) part(key partKey) func(*request) (any, error) {
	fam, _ := s.cfg.Families.Lookup(key.family)
	return func(r *request) (any, error) {
		if asked := r.msg.Header.Get(lagHeader); asked != "" {
			return s.partHealth(r.ctx, key, asked)
		}
		reply, err := s.partAnswer(r, key, fam)
		return reply, goneIfUnavailable(err)
	}
}

// partAnswer answers a part request of another process for counts, a window or a top.
func (s *Server) partAnswer(r *request, key partKey, fam pipeline.Family) (any, error) {
	if h := r.msg.Header.Get(topHeader); h != "" {
		o, err := s.partOwner(key)
		if err != nil {
			return nil, err
		}
		return partTop(r, o, h)
	}
	req, ids, out, err := s.partRequest(r, key, len(fam.Fields))
	if err != nil {
		return nil, err
	}
	o, err := s.partOwner(key)
	if err != nil {
		return nil, err
	}
	if req.Window != "" {
		return partWindow(r, fam, o, ids, &req)
	}
	if err := o.Get(r.ctx, ids, out); err != nil {
		return nil, err
	}
	return pipeline.GetReply{Fields: fam.Fields, Estimated: fam.Estimated(), Counts: out}, nil
}

// partOwner is the partition registered here for key, or gone: removed while the request
// was queued.
func (s *Server) partOwner(key partKey) (Partition, error) {
	o := (*s.owners.Load())[key.family][key.p]
	if o == nil {
		return nil, fmt.Errorf("%w: partition %s/%d: %w", errUnavailable, key.family, key.p, errGone)
	}
	return o, nil
}

// partRequest decodes a request of another process for the counters of ids in the
// partition of key, and makes room for nf counters of each.
func (s *Server) partRequest(r *request, key partKey, nf int) (req pipeline.GetRequest, ids []uint64, out [][]uint64, err error) {
	if err := r.decode(&req); err != nil {
		return req, nil, nil, err
	}
	if len(req.IDs) == 0 || len(req.IDs) > pipeline.MaxQueryIDs {
		return req, nil, nil, fmt.Errorf("%w: ids must hold 1 to %d ids, not %d", pipeline.ErrBadRequest, pipeline.MaxQueryIDs, len(req.IDs))
	}
	ids = make([]uint64, len(req.IDs))
	for i, id := range req.IDs {
		if q := pipeline.PartitionOf(id, s.cfg.Partitions); q != key.p {
			return req, nil, nil, fmt.Errorf("%w: id %d is in partition %d of %d, not %d", pipeline.ErrBadRequest, id, q, s.cfg.Partitions, key.p)
		}
		ids[i] = uint64(id)
	}
	flat := make([]uint64, len(ids)*nf)
	out = make([][]uint64, len(ids))
	for i := range out {
		out[i] = flat[i*nf : (i+1)*nf : (i+1)*nf]
	}
	return req, ids, out, nil
}

// counts gathers the counters of ids from their partitions, in parallel: in-process from
// the partitions registered here, over NATS (<prefix>.part.<family>.<p>) from the others.
// The ids of a partition that no process owns are answered by its standby unless exact,
// and returned in stale, one entry per partition in the order of their first id asked.
// The ids of a partition that is not owned anywhere (and, unless exact, has no standby
// that answers), does not answer before ctx ends or answers an error are returned as
// unavailable, in the order asked, with nil counts. Only when no partition could answer
// is it an error.
func (s *Server) counts(ctx context.Context, fam pipeline.Family, ids []pipeline.ID, exact bool) (counts [][]uint64, unavailable []pipeline.ID, stale []pipeline.Stale, err error) {
	return gather[uint64](s, ctx, fam, ids, &askCounts{hereCounts: hereCounts{ctx, fam.Name}, s: s, fam: fam, exact: exact})
}

// hereCounts asks the partitions registered here for counts; a partition not here is
// answered unavailable (another process's get of several partitions: peers.go).
type hereCounts struct {
	ctx    context.Context
	family string
}

func (h *hereCounts) local(o Partition, ids []uint64, out [][]uint64) error {
	return o.Get(h.ctx, ids, out)
}

func (h *hereCounts) send(o Partition, ids []uint64, out [][]uint64) func() error {
	if sd, ok := o.(Sender); ok {
		return sd.Send(h.ctx, ids, out)
	}
	return nil
}

func (h *hereCounts) remote(p int, _ []uint64, _ [][]uint64) (*pipeline.Stale, error) {
	return nil, notHere(h.family, p)
}

// askCounts asks for counts as a get does: the partitions here, then the owners of the
// others (each on its subject, or a process for several: peers.go), or their standbys
// unless exact.
type askCounts struct {
	hereCounts
	s     *Server
	fam   pipeline.Family
	exact bool
}

func (a *askCounts) remote(p int, ids []uint64, out [][]uint64) (*pipeline.Stale, error) {
	return a.s.remote(a.ctx, a.fam.Name, a.fam.Fields, p, ids, out, a.exact)
}

func (a *askCounts) peer(token string, ids []uint64, out [][]uint64) ([]pipeline.ID, error) {
	return askPeer(a.s, a.ctx, a.fam, token, "", 0, ids, out, countsOf)
}

func countsOf(r *pipeline.GetReply) [][]uint64 { return r.Counts }
