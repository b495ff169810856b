package node

import (
	"context"

	"github.com/tally-dev/tally/stages/counter"
	"github.com/tally-dev/tally/stages/flow"
)

// standbyReads is one counter worker of a standby as the query server sees it: while
// its partition has no owner (a killed owner, until this standby takes it over), a get
// is answered from it, marked stale (see query.Standby).
type standbyReads struct {
	sb *standby
	w  *counter.Worker
}

// Ready reports whether the worker's state may be read: loaded, and of a standby that
// has missed nothing its owner purged (a broken standby's state has a hole).
func (r *standbyReads) Ready() bool {
	return r.w.Ready() && r.sb.ready.Load() && r.sb.current.Load() && !r.sb.broken.Load()
}

func (r *standbyReads) Stale(ctx context.Context, ids []uint64, out [][]uint64) (flow.Behind, error) {
	return r.w.Stale(ctx, ids, out)
}

// serveStandby has the query server answer the reads of standby sb's workers, which
// run, and returns what stops that.
func (n *Node) serveStandby(sb *standby) func() {
	rs := make([]*standbyReads, len(sb.workers))
	for i, fam := range n.cfg.Families {
		rs[i] = &standbyReads{sb: sb, w: sb.workers[i]}
		n.query.SetStandby(fam.Name, sb.p, rs[i])
	}
	return func() {
		for i, fam := range n.cfg.Families {
			n.query.DropStandby(fam.Name, sb.p, rs[i])
		}
	}
}

// stopServing stops serving sb's reads: it is stopped, or taken over (its workers then
// answer as the owner's).
func (sb *standby) stopServing() {
	if sb.unserve != nil {
		sb.unserve()
	}
}
