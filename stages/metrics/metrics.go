// Package metrics exposes a Tally process in the Prometheus text format. Counters are
// read from the stages' atomic statistics when scraped, so the hot path pays nothing for
// them; only checkpoint and query durations are observed as they happen.
package metrics

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/stages/counter"
	"github.com/tally-dev/tally/stages/event"
)

// Source is what the metrics read from a running process.
type Source struct {
	Events   *event.Stats
	Counters *counter.Stats
	// Lag returns each partition's lag by name (event.<p>, counter.<family>.<p>).
	Lag func(ctx context.Context) (*pipeline.HealthReply, error)
	// Hot returns the ids and bytes held in RAM per family.
	Hot func() map[string][2]int64
	// Owned returns the counter partitions this process owns and whether it owns the
	// event stages; Moves counts state backups stored, backups failed and partitions
	// taken over from another process's state.
	Owned func() (partitions int, events bool)
	Moves func() (backups, backupErrs, restored int64)
}

// Metrics is one process's registry.
type Metrics struct {
	reg        *prometheus.Registry
	checkpoint prometheus.Histogram
	flushSize  prometheus.Histogram
	snapshot   prometheus.Histogram
	query      *prometheus.HistogramVec
	src        Source
}

// New registers every metric of src.
func New(src Source) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), src: src}
	m.checkpoint = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "tally_checkpoint_seconds", Help: "Duration of a counter partition's checkpoint (one Badger transaction).",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
	})
	m.flushSize = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "tally_flush_ids", Help: "Ids written by one checkpoint: a hot id counts once however often it changed.",
		Buckets: prometheus.ExponentialBuckets(1, 4, 9),
	})
	m.snapshot = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "tally_snapshot_seconds", Help: "Duration of writing a counter partition's hot-table snapshot, encoding to fsync.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
	})
	m.query = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "tally_query_seconds", Help: "Query latency by subject, from request received to reply sent.",
		Buckets: prometheus.ExponentialBuckets(0.00005, 2, 16),
	}, []string{"query", "outcome"})
	m.reg.MustRegister(m.checkpoint, m.flushSize, m.snapshot, m.query,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	counterFn := func(name, help string, f func() int64) {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(f()) }))
	}
	ev, ct := src.Events, src.Counters
	counterFn("tally_event_messages_total", "Event messages consumed (a batch is one message).", ev.Messages.Load)
	counterFn("tally_events_unchanged_total", "Relation events that changed nothing: a second like, an unlike of nothing (deduplicated by state).", ev.Unchanged.Load)
	counterFn("tally_events_dead_lettered_total", "Messages or batch events dead-lettered as malformed.", ev.Dead.Load)
	counterFn("tally_events_forwarded_total", "Relation events forwarded to their own partition.", ev.Forwarded.Load)
	counterFn("tally_stage_transactions_total", "Event-stage Badger transactions committed.", ev.Txns.Load)
	counterFn("tally_deltas_published_total", "Deltas published after coalescing in the event stage.", ev.Deltas.Load)
	counterFn("tally_outbox_retries_total", "Outbox publishes retried.", ev.Retries.Load)
	counterFn("tally_feed_pushed_total", "Feed counters posts were pushed to.", ev.Pushed.Load)
	counterFn("tally_feed_pulled_total", "Posts left for readers to pull (author above the fan-out limit).", ev.Pulled.Load)
	counterFn("tally_delta_batches_total", "Delta batches applied by counter partitions.", ct.Batches.Load)
	counterFn("tally_delta_batches_duplicate_total", "Delta batches skipped as already applied (deduplicated by sequence).", ct.Duplicates.Load)
	counterFn("tally_hop_gaps_skipped_total", "Gaps in a source's delta batches given up because too much was held above them: batches lost, logged at error.", ct.Hop.GapsSkipped.Load)
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tally_hop_held", Help: "Delta batches held above a gap, waiting for an earlier batch of their source."},
		func() float64 { return float64(ct.Hop.Held.Load()) }))
	counterFn("tally_deltas_applied_total", "Deltas applied to counters.", ct.Deltas.Load)
	counterFn("tally_flushed_ids_total", "Ids written by checkpoints; deltas_applied / flushed_ids is the coalescing ratio.", ct.Flushed.Load)
	counterFn("tally_delta_batches_bad_total", "Undecodable delta batches dead-lettered.", ct.Bad.Load)
	counterFn("tally_change_publish_errors_total", "Change events that could not be published.", ct.ChangeErrs.Load)
	counterFn("tally_cold_reads_total", "Ids read from the cold tier (Badger): cache misses.", ct.ColdReads.Load)
	counterFn("tally_cold_cache_hits_total", "Cold ids answered from the cold cache; hits / (hits + cold_reads) is its hit rate.", ct.ColdHits.Load)
	counterFn("tally_cold_cache_misses_total", "Cold ids not in the cold cache (each one Badger read; same as tally_cold_reads_total).", ct.ColdReads.Load)
	counterFn("tally_evictions_total", "Groups of ids (id >> 40, about 4.4 minutes of snowflake ids) moved from RAM to the cold tier.", ct.Evicted.Load)
	counterFn("tally_evicted_ids_total", "Ids moved from RAM to the cold tier.", ct.EvictedIDs.Load)
	counterFn("tally_snapshots_total", "Hot-table snapshots written.", ct.Snapshots.Load)
	counterFn("tally_snapshot_errors_total", "Hot-table snapshots that could not be written (the journal is kept).", ct.SnapshotErrs.Load)
	moves := func(i int) func() int64 {
		return func() int64 {
			if src.Moves == nil {
				return 0
			}
			var v [3]int64
			v[0], v[1], v[2] = src.Moves()
			return v[i]
		}
	}
	counterFn("tally_state_backups_total", "Rounds of state backups stored in the NATS object store.", moves(0))
	counterFn("tally_state_backup_errors_total", "State backups that could not be stored (deltas and log records are kept).", moves(1))
	counterFn("tally_partitions_taken_over_total", "Counter partitions this process took over from another's state (a backup, or empty).", moves(2))
	owned := func() (int, bool) {
		if src.Owned == nil {
			return 0, false
		}
		return src.Owned()
	}
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tally_owned_partitions", Help: "Counter partitions (every family of each) this process owns."},
		func() float64 { n, _ := owned(); return float64(n) }))
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tally_owns_event_stages", Help: "1 when this process owns the event stages of its prefix."},
		func() float64 {
			if _, ev := owned(); ev {
				return 1
			}
			return 0
		}))
	m.reg.MustRegister(newDynamic(src))
	return m
}

// OnFlush observes a checkpoint.
func (m *Metrics) OnFlush(ids int, took time.Duration) {
	m.checkpoint.Observe(took.Seconds())
	m.flushSize.Observe(float64(ids))
}

// OnSnapshot observes a snapshot written.
func (m *Metrics) OnSnapshot(_ int, took time.Duration) { m.snapshot.Observe(took.Seconds()) }

// OnQuery observes a query.
func (m *Metrics) OnQuery(kind string, took time.Duration, failed bool) {
	outcome := "ok"
	if failed {
		outcome = "error"
	}
	m.query.WithLabelValues(kind, outcome).Observe(took.Seconds())
}

// Handler serves /metrics.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// dynamic collects what has labels known only at scrape time: events by type, lag by
// partition, RAM by family.
type dynamic struct {
	src                                          Source
	descEvents, descLag, descHotIDs, descHotSize *prometheus.Desc
	descCaught                                   *prometheus.Desc
}

func newDynamic(src Source) *dynamic {
	return &dynamic{
		src:         src,
		descEvents:  prometheus.NewDesc("tally_events_applied_total", "Events applied by type.", []string{"type"}, nil),
		descLag:     prometheus.NewDesc("tally_partition_lag", "Stream sequences a partition has not applied yet.", []string{"partition"}, nil),
		descHotIDs:  prometheus.NewDesc("tally_hot_ids", "Ids held in RAM by family.", []string{"family"}, nil),
		descHotSize: prometheus.NewDesc("tally_hot_bytes", "RAM held by the counter tables by family (0 when the table cannot tell).", []string{"family"}, nil),
		descCaught:  prometheus.NewDesc("tally_caught_up", "1 when every partition has applied all of its stream.", nil, nil),
	}
}

func (d *dynamic) Describe(ch chan<- *prometheus.Desc) {
	for _, x := range []*prometheus.Desc{d.descEvents, d.descLag, d.descHotIDs, d.descHotSize, d.descCaught} {
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
	if d.src.Lag == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h, err := d.src.Lag(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(d.descLag, err)
		return
	}
	ok := 0.0
	if h.OK {
		ok = 1
	}
	ch <- prometheus.MustNewConstMetric(d.descCaught, prometheus.GaugeValue, ok)
	for name, lag := range h.Lagging {
		ch <- prometheus.MustNewConstMetric(d.descLag, prometheus.GaugeValue, float64(lag), name)
	}
}
