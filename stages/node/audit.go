package node

import (
	"context"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/stages/cluster"
)

// sampleAudits audits a random sample of posts and users every cfg.AuditEvery while
// this process owns partition 0 (one process of the prefix; an audit gathers the
// relations of every partition from their owners): proof
// in production that counts equal their relations, as tally_audit_checked_total and
// tally_audit_drift_total. It reports, and never repairs: a repair is an operator's
// decision (tally audit --repair). It returns when ctx ends; a failed audit is logged
// and the next one tried, since an audit is a check, not part of counting.
func (n *Node) sampleAudits(ctx context.Context) error {
	if n.cfg.AuditEvery <= 0 {
		return nil
	}
	return cluster.Every(ctx, n.cfg.AuditEvery, func() error {
		if !n.holds(0) {
			return nil // the owner of partition 0 samples
		}
		r, err := n.query.Audit(ctx, pipeline.AuditRequest{Sample: n.cfg.AuditSample})
		if err != nil { // an audit is a check, never a reason to stop counting
			if ctx.Err() == nil {
				n.log.Warn("audit sample failed", "err", err)
			}
			return nil
		}
		for _, d := range r.Drift {
			n.log.Warn("audit found drift: a counter differs from its relations", "family", d.Family, "id", d.ID, "field", d.Field,
				"counter", d.Counter, "relations", d.Relations, "repair", "tally audit --repair "+d.Family+" "+d.ID.String())
		}
		n.log.Debug("audit sample", "posts", len(r.Posts), "users", len(r.Users), "checked", r.Checked, "drift", len(r.Drift), "skipped", len(r.Skipped))
		return nil
	})
}
