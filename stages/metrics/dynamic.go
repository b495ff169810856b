package metrics

import (
	"context"
	"strconv"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tally-dev/tally/pipeline/buildinfo"
)

// dynamic collects what has labels known only at scrape time: events by type, lag by
// partition, RAM by family.
type dynamic struct {
	src Source
	// lagErrs counts the lag lookups that failed. It is reported by this collector,
	// after the lookups of the scrape: a counter of its own would be collected
	// concurrently with them and show the count of the scrape before.
	lagErrs                                      atomic.Int64
	descEvents, descLag, descHotIDs, descHotSize *prometheus.Desc
	descLagAge, descCaught, descReady, descErrs  *prometheus.Desc
	descStandbyLag                               *prometheus.Desc
	descStreamBytes, descStreamMax               *prometheus.Desc
}

func newDynamic(src Source) *dynamic {
	part := []string{"stage", "family", "partition"}
	return &dynamic{
		src:             src,
		descErrs:        prometheus.NewDesc("tally_lag_lookup_errors_total", "Partition lags and stream sizes that could not be looked up in NATS during a scrape (their series are left out of it).", nil, nil),
		descEvents:      prometheus.NewDesc("tally_events_applied_total", "Events applied by type.", []string{"type"}, nil),
		descLag:         prometheus.NewDesc("tally_partition_lag", "Stream sequences a partition of this process has not applied yet (0 included); family is empty for an event stage.", part, nil),
		descLagAge:      prometheus.NewDesc("tally_partition_lag_seconds", "How long ago the oldest message a partition of this process has not applied yet was stored; 0 when caught up.", part, nil),
		descHotIDs:      prometheus.NewDesc("tally_hot_ids", "Ids held in RAM by family.", []string{"family"}, nil),
		descHotSize:     prometheus.NewDesc("tally_hot_bytes", "RAM held by the counter tables by family (0 when the table cannot tell).", []string{"family"}, nil),
		descCaught:      prometheus.NewDesc("tally_caught_up", "1 when every partition of this process has applied all of its stream (0 when a lag could not be looked up).", nil, nil),
		descReady:       prometheus.NewDesc("tally_ready", "1 when every partition of this process is loaded and within --max-lag, as /readyz answers 200.", nil, nil),
		descStreamBytes: prometheus.NewDesc("tally_stream_bytes", "Bytes a stream of the prefix holds.", []string{"stream"}, nil),
		descStreamMax:   prometheus.NewDesc("tally_stream_max_bytes", "The stream's max bytes (-1 unbounded): when full it drops its oldest messages, consumed or not.", []string{"stream"}, nil),
		descStandbyLag:  prometheus.NewDesc("tally_standby_lag", "Stream messages (events and deltas) the warm copies this process keeps have not applied yet: what a takeover would replay beyond the owners' own lag.", nil, nil),
	}
}

func (d *dynamic) Describe(ch chan<- *prometheus.Desc) {
	for _, x := range []*prometheus.Desc{d.descEvents, d.descLag, d.descLagAge, d.descHotIDs, d.descHotSize, d.descCaught, d.descReady, d.descErrs, d.descStandbyLag, d.descStreamBytes, d.descStreamMax} {
		ch <- x
	}
}

func (d *dynamic) Collect(ch chan<- prometheus.Metric) {
	for t, n := range d.src.Events.ByType {
		ch <- prometheus.MustNewConstMetric(d.descEvents, prometheus.CounterValue, float64(n.Load()), t)
	}
	if d.src.Hot != nil {
		for fam, v := range d.src.Hot() {
			ch <- prometheus.MustNewConstMetric(d.descHotIDs, prometheus.GaugeValue, float64(v[0]), fam)
			ch <- prometheus.MustNewConstMetric(d.descHotSize, prometheus.GaugeValue, float64(v[1]), fam)
		}
	}
	if d.src.Lags == nil {
		ch <- prometheus.MustNewConstMetric(d.descErrs, prometheus.CounterValue, 0)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), lagTimeout)
	defer cancel()
	if d.src.StandbyLag != nil {
		if lag, err := d.src.StandbyLag(ctx); err != nil {
			d.lagErrs.Add(1)
		} else {
			ch <- prometheus.MustNewConstMetric(d.descStandbyLag, prometheus.GaugeValue, float64(lag))
		}
	}
	if d.src.Streams != nil {
		for _, st := range d.src.Streams(ctx) {
			if st.Err != nil {
				d.lagErrs.Add(1)
				continue
			}
			ch <- prometheus.MustNewConstMetric(d.descStreamBytes, prometheus.GaugeValue, float64(st.Bytes), st.Name)
			ch <- prometheus.MustNewConstMetric(d.descStreamMax, prometheus.GaugeValue, float64(st.MaxBytes), st.Name)
		}
	}
	caught, ready := 1.0, 1.0
	for _, l := range d.src.Lags(ctx) {
		if l.Err != nil {
			d.lagErrs.Add(1)
			caught, ready = 0, 0
			continue
		}
		p := strconv.Itoa(l.Partition)
		ch <- prometheus.MustNewConstMetric(d.descLag, prometheus.GaugeValue, float64(l.Msgs), l.Stage, l.Family, p)
		ch <- prometheus.MustNewConstMetric(d.descLagAge, prometheus.GaugeValue, l.Age.Seconds(), l.Stage, l.Family, p)
		if l.Msgs > 0 {
			caught = 0
		}
		if !l.Ready {
			ready = 0
		}
	}
	ch <- prometheus.MustNewConstMetric(d.descCaught, prometheus.GaugeValue, caught)
	ch <- prometheus.MustNewConstMetric(d.descReady, prometheus.GaugeValue, ready)
	ch <- prometheus.MustNewConstMetric(d.descErrs, prometheus.CounterValue, float64(d.lagErrs.Load()))
}

// buildInfo is tally_build_info: always 1, labelled with what the binary was built from.
func buildInfo(version string) prometheus.Collector {
	bi := buildinfo.Read()
	if version == "" {
		version = bi.Version
	}
	modified := ""
	if bi.Revision != "" {
		modified = strconv.FormatBool(bi.Modified)
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tally_build_info", Help: "1, labelled with the version, VCS revision and Go version tallyd was built from.",
		ConstLabels: prometheus.Labels{"version": version, "revision": bi.Revision, "modified": modified, "go": bi.Go},
	})
	g.Set(1)
	return g
}
