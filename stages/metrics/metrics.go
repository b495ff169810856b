// Package metrics exposes a Tally process in the Prometheus text format. Counters are
// read from the stages' atomic statistics when scraped, so the hot path pays nothing for
// them; only checkpoint and query durations are observed as they happen. A scrape keeps
// answering when NATS does not: a lag it cannot look up is counted, not an error.
package metrics

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tally-dev/tally/stages/counter"
	"github.com/tally-dev/tally/stages/event"
	"github.com/tally-dev/tally/stages/flow"
)

// Source is what the metrics read from a running process.
type Source struct {
	Events   *event.Stats
	Counters *counter.Stats
	// StandbyEvents counts what the standbys' event stages apply (nil: none).
	StandbyEvents *event.Stats
	// Lags returns the lag of every partition of this process, each with whether the
	// lookup failed.
	Lags func(ctx context.Context) []Lag
	// Hot returns the ids and bytes held in RAM per family.
	Hot func() map[string][2]int64
	// Owned returns the counter partitions this process owns and whether it owns the
	// event stages; Moves counts state backups stored, backups failed and partitions
	// taken over from another process's state: restored from a backup (or empty), and
	// warm (from a standby kept here).
	Owned func() (partitions int, events bool)
	Moves func() (backups, backupErrs, restored, warm int64)
	// Standbys returns the partitions of which this process keeps a warm copy that has
	// reached their current backups; StandbyLag the stream messages those copies have
	// not applied yet.
	Standbys   func() int
	StandbyLag func(ctx context.Context) (uint64, error)
	// Version is the version tally_build_info shows; empty reads the module version
	// the binary was built from.
	Version string
	// Streams returns how full each of the prefix's streams is (tally_stream_bytes,
	// tally_stream_max_bytes): above its max bytes a stream drops its oldest messages,
	// consumed or not.
	Streams func(ctx context.Context) []Stream
	// Partitions is the prefix's partition count (tally_partitions): the sum of every
	// process's tally_owned_partitions below it is partitions nobody applies.
	Partitions int
	// NATS returns how many times the process's NATS connections were lost, and how
	// many it holds.
	NATS func() (disconnects int64, conns int)
	// SlowStops counts partitions whose stop here took longer than a lease TTL (nil:
	// none).
	SlowStops func() int64
	// Refused returns the partitions this process cannot start, their state backup
	// unreadable, left to their last owner (nil: none).
	Refused func() int
}

// Stream is the size of one stream and its bound (-1 when unbounded).
type Stream struct {
	Name     string
	Bytes    uint64
	MaxBytes int64
	Err      error // the lookup failed (NATS did not answer)
}

// Lag is how far one partition is behind its stream.
type Lag struct {
	Stage     string // "event" or "counter"
	Family    string // "" for an event stage
	Partition int
	Msgs      uint64        // stream sequences not applied yet
	Age       time.Duration // how long ago the oldest of them was stored
	Ready     bool          // loaded and within the process's --max-lag
	Err       error         // the lookup failed (NATS did not answer)
}

// lagTimeout bounds the lag lookups of one scrape, well inside Prometheus's default
// scrape timeout (10 s): when NATS does not answer, the rest of the scrape still does.
const lagTimeout = 3 * time.Second

// Metrics is one process's registry.
type Metrics struct {
	reg        *prometheus.Registry
	checkpoint prometheus.Histogram
	flushSize  prometheus.Histogram
	snapshot   prometheus.Histogram
	query      *prometheus.HistogramVec
	audit      auditMetrics
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
	m.reg.MustRegister(m.checkpoint, m.flushSize, m.snapshot, m.query, buildInfo(src.Version),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.audit = newAuditMetrics(m.reg)
	counterFn := func(name, help string, f func() int64) {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(f()) }))
	}
	ev, ct := src.Events, src.Counters
	counterFn("tally_event_messages_total", "Event messages consumed (a batch is one message).", ev.Messages.Load)
	counterFn("tally_reader_gaps_total", "Stream readers (events, deltas, logs) found passing over stored messages of their subject they were never delivered, when a consumer was made again after a fault: messages a partition would not apply. Any is a fault to report.", flow.Gaps.Load)
	counterFn("tally_like_keys_written_total", "Badger keys that likes and unlikes set or deleted: like records, liker chunks, a heavy liker's relation keys.", ev.LikeKeys.Load)
	counterFn("tally_events_unchanged_total", "Relation events that changed nothing: a second like, an unlike of nothing (deduplicated by state).", ev.Unchanged.Load)
	counterFn("tally_relation_places_forgotten_total", "Relations made again more than 16 times after they were made, of which the oldest place was forgotten: an unlike placed among them and arriving after them would move the relation to a later like than the stream's order.", ev.Forgotten.Load)
	counterFn("tally_events_dead_lettered_total", "Messages or batch events dead-lettered as malformed.", ev.Dead.Load)
	counterFn("tally_events_forwarded_total", "Relation events forwarded to their own partition.", ev.Forwarded.Load)
	counterFn("tally_stage_transactions_total", "Event-stage Badger transactions committed.", ev.Txns.Load)
	counterFn("tally_deltas_published_total", "Deltas published after coalescing in the event stage.", ev.Deltas.Load)
	counterFn("tally_outbox_retries_total", "Outbox publishes retried.", ev.Retries.Load)
	counterFn("tally_event_txn_splits_total", "Event-stage transactions that did not fit (Badger's bound, the log record's size) and committed fewer messages.", ev.Splits.Load)
	counterFn("tally_event_hops_duplicate_total", "Hop batches of another event partition skipped as applied already (deduplicated by sequence).", ev.HopDups.Load)
	counterFn("tally_resident_hits_total", "Reads of a user's reader state or like record (a heavy liker's like states too) that the event stages answered from RAM (--state-mem).", ev.ResidentHits.Load)
	counterFn("tally_resident_misses_total", "Reads of a user's reader state or like record that went to Badger: a hit ratio that falls says --state-mem is small for the users active lately.", ev.ResidentMisses.Load)
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tally_resident_bytes", Help: "Bytes the event stages keep in RAM of their users' state, by --state-mem's measure (three quarters of it at most)."},
		func() float64 { return float64(ev.ResidentBytes.Load()) }))
	counterFn("tally_event_hop_gaps_skipped_total", "Gaps in another event partition's hop batches given up because too much was held above them: logged at error.", ev.HopGaps.Load)
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tally_event_hops_held", Help: "Hop batches of other event partitions held above a gap."},
		func() float64 { return float64(ev.HopsHeld.Load()) }))
	counterFn("tally_log_records_replayed_from_writes_total", "Log records a new owner's replay applied from the writes they carry, after a restore, rather than executing their events again.", ev.ReplayedWrites.Load)
	counterFn("tally_log_records_without_writes_total", "Log records the event stages appended without their transaction's writes, which did not fit in one NATS message with the rest: a standby executes their events again.", ev.WritesLeftOut.Load)
	if sb := src.StandbyEvents; sb != nil {
		counterFn("tally_standby_records_written_total", "Log records the standbys applied from the writes they carry (the owner's transaction key for key).", sb.MirroredWrites.Load)
		counterFn("tally_standby_records_executed_total", "Log records the standbys applied by executing their events again: records without writes (too large for one, or of a tallyd before).", sb.MirroredEvents.Load)
	}
	counterFn("tally_feed_pushed_total", "Feed counters posts were pushed to.", ev.Pushed.Load)
	counterFn("tally_feed_pulled_total", "Posts left for readers to pull (author above the fan-out limit).", ev.Pulled.Load)
	counterFn("tally_delta_batches_total", "Delta batches applied by counter partitions.", ct.Batches.Load)
	counterFn("tally_delta_batches_duplicate_total", "Delta batches skipped as already applied (deduplicated by sequence).", ct.Duplicates.Load)
	counterFn("tally_hop_gaps_skipped_total", "Gaps in a source's delta batches given up because too much was held above them: batches lost, logged at error.", ct.Hop.GapsSkipped.Load)
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tally_hop_held", Help: "Delta batches held above a gap, waiting for an earlier batch of their source."},
		func() float64 { return float64(ct.Hop.Held.Load()) }))
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tally_hop_held_bytes", Help: "Payload bytes of the delta batches held above a gap (stored in Badger under their own keys)."},
		func() float64 { return float64(ct.Hop.HeldBytes.Load()) }))
	counterFn("tally_deltas_applied_total", "Deltas applied to counters.", ct.Deltas.Load)
	counterFn("tally_flushed_ids_total", "Ids written by checkpoints; deltas_applied / flushed_ids is the coalescing ratio.", ct.Flushed.Load)
	counterFn("tally_delta_batches_bad_total", "Undecodable delta batches dead-lettered.", ct.Bad.Load)
	counterFn("tally_change_publish_errors_total", "Change events that could not be published.", ct.ChangeErrs.Load)
	counterFn("tally_changes_fenced_total", "Change events refused because another owner announced after this process's lease lapsed (also in tally_change_publish_errors_total).", ct.ChangesFenced.Load)
	counterFn("tally_partition_gets_read_total", "A partition's part of a read (get, windowed get, top, stale read) done by the request itself while the partition's worker waited.", ct.Peeked.Load)
	counterFn("tally_partition_gets_queued_total", "A partition's part of a read handed to the partition's worker: the worker busy, or an id in the cold tier.", ct.Queued.Load)
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
			var v [4]int64
			v[0], v[1], v[2], v[3] = src.Moves()
			return v[i]
		}
	}
	nats := func() (int64, int) {
		if src.NATS == nil {
			return 0, 0
		}
		return src.NATS()
	}
	counterFn("tally_nats_disconnects_total", "Times a connection of this process to NATS was lost: a server restarting or lost, or cutting the connection off (a slow consumer past its max_pending; the server's log says). Each reconnects by itself.",
		func() int64 { n, _ := nats(); return n })
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tally_nats_connections", Help: "Connections this process holds to NATS: streams, leases and queries, and those its partitions' stream readers pull on (four to eight readers each)."},
		func() float64 { _, n := nats(); return float64(n) }))
	counterFn("tally_state_backups_total", "Rounds of state backups stored in the NATS object store.", moves(0))
	counterFn("tally_state_backup_errors_total", "State backups that could not be stored (deltas and log records are kept).", moves(1))
	counterFn("tally_partitions_taken_over_total", "Partitions this process took over from another's state by restoring it (a backup, or empty).", moves(2))
	counterFn("tally_partitions_taken_over_warm_total", "Partitions this process took over from a standby it kept (no restore).", moves(3))
	counterFn("tally_partition_slow_stops_total", "Partitions whose stop here took longer than a lease TTL: meanwhile the others no longer left them to this process, their last owner, and their standbys took them over.",
		func() int64 {
			if src.SlowStops == nil {
				return 0
			}
			return src.SlowStops()
		})
	owned := func() (int, bool) {
		if src.Owned == nil {
			return 0, false
		}
		return src.Owned()
	}
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tally_owned_partitions", Help: "Counter partitions (every family of each) this process owns."},
		func() float64 { n, _ := owned(); return float64(n) }))
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tally_partitions", Help: "Partitions of the prefix (--partitions): the sum of tally_owned_partitions over its processes below it means partitions no process applies."},
		func() float64 { return float64(src.Partitions) }))
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tally_owns_event_stages", Help: "1 when this process owns the event stage of some partition of its prefix (each partition's stage moves with its counters)."},
		func() float64 {
			if _, ev := owned(); ev {
				return 1
			}
			return 0
		}))
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tally_standby_partitions", Help: "Partitions owned by another process of which this one keeps a warm copy that has reached their current backups: taken over without a restore, replaying only what came after."},
		func() float64 {
			if src.Standbys == nil {
				return 0
			}
			return float64(src.Standbys())
		}))
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tally_partitions_refused", Help: "Partitions this process cannot start because their state backup cannot be read (refused by its digest or checksums): each is left to its last owner, which keeps its state and replaces the backup at its next one. Non-zero for longer than a backup period means that owner is gone (docs/operations.md)."},
		func() float64 {
			if src.Refused == nil {
				return 0
			}
			return float64(src.Refused())
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

// Handler serves /metrics. A collector that fails leaves its series out rather than
// turning the whole scrape into an error.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}
