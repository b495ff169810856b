package metrics

import "github.com/prometheus/client_golang/prometheus"

// auditMetrics count what audits (tally audit and the background sampler) compared
// and found: drift / checked is the share of counters that disagree with their
// relations, which is 0 in a correct deployment.
type auditMetrics struct {
	checked, drift prometheus.Counter
}

func newAuditMetrics(reg *prometheus.Registry) auditMetrics {
	a := auditMetrics{
		checked: prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_audit_checked_total",
			Help: "Counters an audit compared with their recount from the relations (ids × fields), skipped ones excluded."}),
		drift: prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_audit_drift_total",
			Help: "Counters an audit found different from their relations at a consistent point (each drift counts once per audit that saw it)."}),
	}
	reg.MustRegister(a.checked, a.drift)
	return a
}

// OnAudit counts one audit: counters compared and counters that drifted.
func (m *Metrics) OnAudit(checked, drifted int) {
	m.audit.checked.Add(float64(checked))
	m.audit.drift.Add(float64(drifted))
}
