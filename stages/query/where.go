package query

import (
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/pipeline"
)

// A client may ask a get of the processes serving its partitions itself (1.9,
// pipeline.WhereHeader): a get asked with the header is answered with where this process
// knows each partition of the family is served — its own partitions under its own peer
// token, the others under the tokens it learned (peers.go) — and this process answers
// gets of the ids of its own partitions on <prefix>.get.<family>.at.<token>
// (getAt). Where a get of two processes' partitions went to one of them and that one
// asked the other, two round trips in a row, the client asks both at once.

// where is where the partitions of family are served, as this process knows them.
func (s *Server) where(family string) pipeline.Where {
	owners := (*s.owners.Load())[family]
	w := pipeline.Where{At: make([]string, len(owners))}
	for p, o := range owners {
		if o != nil {
			w.At[p] = s.peers.token
		} else {
			w.At[p] = s.peers.at(family, p)
		}
	}
	return w
}

// handleGetAt takes a client's get of the ids of partitions served here (Subjects.GetAt)
// and hands it to an answerer (handOver).
func (s *Server) handleGetAt(m *nats.Msg) {
	s.handOver(&job{kind: "get.at", h: s.getAt, m: m})
}

// getAt answers a client's get on <prefix>.get.<family>.at.<token> from the partitions
// registered here only, as it answers another process's (peerGet): the ids of a
// partition not served here, or unavailable here (handed over), are answered
// unavailable and never asked of another process or a standby, and the client asks them
// on <prefix>.get.<family>. A window is asked there too.
func (s *Server) getAt(r *request) (any, error) {
	family, _, _ := strings.Cut(strings.TrimPrefix(r.msg.Subject, s.cfg.Subjects.Prefix+".get."), ".")
	fam, req, err := s.getRequest(r, family)
	if err != nil {
		return nil, err
	}
	if req.Window != "" {
		return nil, fmt.Errorf("%w: a window is asked on %s, not of one process", pipeline.ErrBadRequest, s.cfg.Subjects.Get(family))
	}
	counts, unavailable, _, err := gather[uint64](s, r.ctx, fam, req.IDs, &hereCounts{r.ctx, fam.Name})
	if err != nil {
		return nil, err
	}
	return pipeline.GetReply{Fields: fam.Fields, Estimated: fam.Estimated(), Counts: counts, Unavailable: unavailable}, nil
}
