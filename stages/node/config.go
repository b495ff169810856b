package node

import (
	"context"
	"fmt"
	"time"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/embedded"
	"github.com/tally-dev/tally/pipeline/natsconn"
	"github.com/tally-dev/tally/stages/hop"
	"github.com/tally-dev/tally/stages/query"
)

// Config is everything a Tally process needs; DefaultConfig fills it in.
type Config struct {
	// DataDir holds Badger (DataDir/state) and the embedded NATS store (DataDir/nats).
	DataDir string
	// Listen is the embedded NATS address (host:port); ignored with NATSURL.
	Listen string
	// NATSURL joins existing NATS servers (comma-separated) instead of embedding one.
	NATSURL string
	// NATSAuth is how this process authenticates to the servers of NATSURL: credentials,
	// nkey, TLS, a nats CLI context.
	NATSAuth natsconn.Auth
	// NATSServer secures the embedded server: users, nkeys, TLS or a nats-server
	// configuration file. The process itself connects in-process as a user of its own.
	NATSServer embedded.Auth
	Partitions int
	Prefix     string
	Families   []pipeline.Family
	// FlushInterval is the counter workers' coalescing window.
	FlushInterval time.Duration
	// Replicas of every stream and bucket; 0 keeps an existing one's, and makes a new one
	// with 3 on a NATS cluster of three or more servers, else 1.
	Replicas int
	// The stream settings below are applied when set; 0 (or "") keeps what an existing
	// stream has (an operator's nats stream edit survives a restart) and gives a new one
	// Tally's default (see pipeline.StreamConfig).
	//
	// DupWindow is how long JetStream drops a re-sent Nats-Msg-Id (2 minutes when new).
	DupWindow time.Duration
	// EventsMaxAge is how long the events stream keeps events (7 days when new).
	EventsMaxAge time.Duration
	// EventsMaxBytes bounds the events stream's size, -1 unbounded (the default when new).
	EventsMaxBytes int64
	// EventsCompression is the events stream's compression: s2 or none (when new).
	EventsCompression string
	// SyncWrites fsyncs every Badger commit (exact across power loss, slower).
	SyncWrites bool
	// ColdCompression is how Badger writes its tables: "none" (or "") or "snappy"
	// (cold.Options.Snappy): snappy takes ~30 % less disk, and more heap to build
	// a table plus a block cache to read one.
	ColdCompression string
	// Table picks the in-RAM counter table: "map" (a Go map) or "hot" (packed).
	Table string
	// FanoutLimit is the most followers a post is pushed to; posts of authors with more
	// are pulled by their readers (one write per post however many followers).
	FanoutLimit int
	// PurgeEvery is how often each counter partition purges the deltas its checkpoint
	// covers, bounding the deltas stream by what is not yet checkpointed; 0 never purges.
	PurgeEvery time.Duration
	// ColdAge moves counters of ids older than this (by their snowflake time, see
	// IDEpoch) from RAM to the cold tier; 0 keeps them. Ids below 2^40 have no time and
	// never age.
	ColdAge time.Duration
	// IDEpoch is the Unix time in ms that an id's snowflake time (id >> 22) counts from:
	// Twitter's by default.
	IDEpoch int64
	// MaxMem is the memory budget of the process (bytes), shared out by SplitMem: the
	// counter tables' bound, Badger's memtables and caches, and the Go runtime's soft
	// limit (set by tallyd, the process's owner: see cmd/tallyd). 0 is three quarters of
	// what the machine allows the process (Mem).
	MaxMem int64
	// HotMaxMem, when positive, bounds the RAM of all counter tables (bytes) instead of
	// their share of MaxMem: above it, the least recently used groups of ids move to the
	// cold tier.
	HotMaxMem int64
	// ColdCache is the most cold ids whose counters stay in RAM after a read, for the
	// whole process (about 100 bytes each, outside the counter tables' bound).
	ColdCache int
	// StateMem is the RAM the event partitions keep of what their events read of their
	// state (reader states and like records of the users active lately, graph.Resident),
	// shared evenly by the partitions: a like or a notification then costs no Badger
	// read. 0 keeps none.
	StateMem int64
	// Windows keeps the windowed counts (the net change of every counter over the last
	// 5 minutes, hour and day, docs/contract.md): the event stages send the changes by
	// minute with their deltas. Counter workers before 1.2 cannot decode those: on only
	// once every tallyd of the prefix runs 1.2.
	Windows bool
	// KeyedEvents stores each event under its key's subject, as tallyd before 1.8 did
	// (pipeline.StreamConfig.KeyedEvents): on while a rolling upgrade from before 1.8
	// goes on, since such a tallyd refuses events stored under their partition's subject.
	KeyedEvents bool
	// Snapshots keeps a snapshot of every counter table in DataDir/snapshots, so a
	// restart loads RAM in one read per partition.
	Snapshots bool
	// SnapshotMin is the fewest journaled ids after which a partition writes a new
	// snapshot (it also waits for a quarter of its table); 0 is 65 536.
	SnapshotMin int
	// LeaseTTL is how long the ownership lease outlives its owner (DefaultLeaseTTL).
	LeaseTTL time.Duration
	// Join shares the partitions (event stages and counters) with the other tallyd of the
	// prefix instead of refusing to start while another is live, and takes a share of
	// theirs over when one stops or dies.
	Join bool
	// BackupEvery, when positive, stores backups of each partition owned here (its event
	// stage's state and its counters) in the NATS object store <PREFIX>_STATE this often
	// (a round of backups that took t waits at least 3t before the next: see
	// backupRest), and purges deltas and log records only up to what the last backups
	// cover: a new owner on another machine restores them and replays the streams. (Every
	// event-stage transaction is logged either way, its outbox kept there; without backups
	// each stage purges its own log.)
	BackupEvery time.Duration
	// Standbys, with BackupEvery, keeps warm copies of some partitions other processes
	// own (each partition's copy in one other process, see cluster.Standbys): a takeover
	// then replays a short tail instead of restoring a backup, at the cost of a share
	// more RAM and CPU in each process.
	Standbys bool
	// Metrics is the address of the HTTP server for /metrics (Prometheus), /livez,
	// /readyz and /healthz; empty disables it.
	Metrics string
	// Pprof also serves Go's profiles under /debug/pprof/ on the Metrics address.
	Pprof bool
	// AuditEvery, when positive, audits AuditSample posts and AuditSample users picked
	// at random this often in the process owning partition 0: their like, comment,
	// follower and following counts recounted from the relations (see tally audit). Off
	// by default: a recount of comments reads every comment relation.
	AuditEvery  time.Duration
	AuditSample int
	// MaxLag is how far each partition may be behind its stream while the process is
	// ready (/readyz, and tally.health's ready for the whole prefix): a number of
	// messages, or the age of the oldest message not applied yet (DefaultMaxLagAge).
	MaxLag query.MaxLag
	// WrapPublisher, for tests only, wraps what the event stages' and counter workers'
	// outboxes publish through (js), salt telling each stage and worker apart: the chaos
	// test's way to fail, delay, reorder and lose internal publishes in a real process
	// (hoptest.Wrap). Nil (always, in production) publishes through js itself.
	WrapPublisher func(js hop.Publisher, salt uint64) hop.Publisher
	// HoldEvents, for tests only, is called with the partition before an event stage
	// takes each message from the events stream, which it holds back while it blocks: a
	// partition seconds behind without the backlog. Nil (always, in production) holds
	// nothing.
	HoldEvents func(p int)
	// ChangePublisher, for tests only, wraps what the counter workers of family's
	// partition p publish their change events through: a test's way to stop a process
	// between the parts of a checkpoint's change events. Nil (always, in production)
	// publishes through NATS.
	ChangePublisher func(family string, p int, pub hop.Publisher) hop.Publisher
	// StandbyLag is how far behind its owner a standby may be and still count as warm
	// (caught up): the age of the oldest log record or delta of its partition it has not
	// applied (0: DefaultStandbyLag). A partition moves to a joining process only once
	// that process's standby of it is warm.
	StandbyLag time.Duration
	// MovePatience is how long a partition due to move to another process waits there
	// for its standby to get warm before it moves all the same, restored from its backup
	// (0: 30 lease TTLs): a standby that cannot keep up must not keep the partitions
	// unbalanced for ever. The time that process says its standby is priming does not
	// count (cluster.Owners.SetPriming): priming grows with the partition's state, one
	// standby at a time, and a move cold meanwhile left the partition unanswered for
	// the minutes its restore took.
	MovePatience time.Duration
	// StandbyCheck, for tests only, is how often a standby looks at its partition's
	// backups (0: a quarter of BackupEvery, at most a second). Longer than BackupEvery,
	// standbys miss backups and start again from the newest, as a stalled one would.
	StandbyCheck time.Duration
	// BackupRest, for tests only, is how many times its own length a round of backups
	// waits before the next (0: backupRest; negative: none, rounds back to back, which
	// leaves a standby no time to prime and makes it miss backups).
	BackupRest int
	// startHook, a test hook, is called as a partition's start begins, its lease taken:
	// where a start restores its state.
	startHook func(ctx context.Context, p int)
	// primeHook, a test hook, is called as a standby's priming begins, its turn come:
	// where it restores the backups.
	primeHook func(ctx context.Context, p int)
	// stopHook, a test hook, is called as a partition's stop has stopped its stage,
	// before its workers stop.
	stopHook func(p int)
	// registerHook, a test hook, is called as a started partition is about to be served
	// by the query server.
	registerHook func(n *Node, pt *owned)
}

// DefaultMaxLagAge is ready while no partition has left a message unapplied for longer than
// 30 s: under a steady load the oldest unapplied message is about a flush interval old,
// while a stuck partition, or one replaying a long backlog, ages past it.
const DefaultMaxLagAge = 30 * time.Second

// DefaultStandbyLag is how far behind its owner a warm standby may be (see
// Config.StandbyLag): a few flushes of a steady load, well short of a restore.
const DefaultStandbyLag = time.Second

// SnowflakeEpoch is Twitter's snowflake epoch, 2010-11-04 01:42:54.657 UTC, in Unix ms.
const SnowflakeEpoch = 1288834974657

// DefaultConfig is one process owning 16 partitions with embedded NATS on
// 127.0.0.1:4222 and data in ./data.
func DefaultConfig() Config {
	sc := pipeline.DefaultStreamConfig()
	return Config{
		DataDir:       "data",
		Listen:        "127.0.0.1:4222",
		Partitions:    sc.Partitions,
		Prefix:        pipeline.DefaultPrefix,
		Families:      pipeline.DefaultFamilies(),
		FlushInterval: 100 * time.Millisecond,
		Replicas:      0,
		Table:         "hot",
		FanoutLimit:   10_000,
		PurgeEvery:    time.Minute,
		ColdAge:       180 * 24 * time.Hour,
		IDEpoch:       SnowflakeEpoch,
		ColdCache:     1 << 18,
		StateMem:      128 << 20,
		Snapshots:     true,
		Windows:       true,
		LeaseTTL:      DefaultLeaseTTL,
		Standbys:      true,
		AuditSample:   100,
		MaxLag:        query.MaxLag{Age: DefaultMaxLagAge},
	}
}

func (c Config) validate() error {
	if c.Partitions < 1 || c.Partitions > 1024 {
		return fmt.Errorf("partitions must be 1..1024, not %d", c.Partitions)
	}
	if c.DataDir == "" {
		return fmt.Errorf("a data directory is required")
	}
	if c.FlushInterval <= 0 {
		return fmt.Errorf("flush interval must be positive")
	}
	if c.LeaseTTL < 300*time.Millisecond {
		return fmt.Errorf("lease TTL %v is too short (at least 300ms)", c.LeaseTTL)
	}
	for _, v := range []struct {
		name     string
		negative bool
	}{
		{"cold age", c.ColdAge < 0}, {"max mem", c.MaxMem < 0}, {"hot max mem", c.HotMaxMem < 0},
		{"cold cache", c.ColdCache < 0}, {"state mem", c.StateMem < 0}, {"events max age", c.EventsMaxAge < 0},
		{"duplicate window", c.DupWindow < 0}, {"replicas", c.Replicas < 0},
		// 0 turns these off or takes their default; a negative one would do the same unsaid.
		{"backup every", c.BackupEvery < 0}, {"purge every", c.PurgeEvery < 0}, {"audit every", c.AuditEvery < 0},
		{"audit sample", c.AuditSample < 0}, {"standby lag", c.StandbyLag < 0}, {"move patience", c.MovePatience < 0},
	} {
		if v.negative {
			return fmt.Errorf("%s must not be negative", v.name)
		}
	}
	if c.EventsMaxBytes < -1 {
		return fmt.Errorf("events max bytes must be -1 (unbounded), 0 (the stream's) or a size, not %d", c.EventsMaxBytes)
	}
	if c.EventsCompression != "" && c.EventsCompression != "s2" && c.EventsCompression != "none" {
		return fmt.Errorf("events compression %q: s2 or none", c.EventsCompression)
	}
	if c.ColdCompression != "" && c.ColdCompression != "none" && !c.snappy() {
		return fmt.Errorf("cold compression %q: none or snappy", c.ColdCompression)
	}
	if c.AuditEvery > 0 && (c.AuditSample < 1 || c.AuditSample > pipeline.MaxAuditSample) {
		return fmt.Errorf("audit sample must be 1..%d, not %d", pipeline.MaxAuditSample, c.AuditSample)
	}
	if c.Pprof && c.Metrics == "" {
		return fmt.Errorf("profiles are served on the metrics address: --pprof needs --metrics")
	}
	if c.Join && c.BackupEvery <= 0 {
		return fmt.Errorf("partitions move between the processes that join through state backups in NATS: --join needs --backup-every")
	}
	if _, err := newTable(c.Table); err != nil {
		return err
	}
	return pipeline.Families(c.Families).Validate()
}

// streams is the stream configuration: what is not set keeps an existing stream's.
func (c Config) streams() pipeline.StreamConfig {
	return pipeline.StreamConfig{Subjects: pipeline.NewSubjects(c.Prefix), Partitions: c.Partitions, Replicas: c.Replicas, NewReplicas: c.Replicas,
		DupWindow: c.DupWindow, EventsMaxAge: c.EventsMaxAge, EventsMaxBytes: c.EventsMaxBytes, EventsCompression: c.EventsCompression, KeyedEvents: c.KeyedEvents}
}

// publisher returns what the stage or worker told apart by salt publishes through: js,
// wrapped by WrapPublisher when a test set it.
func (c Config) publisher(js hop.Publisher, salt uint64) hop.Publisher {
	if c.WrapPublisher == nil {
		return js
	}
	return c.WrapPublisher(js, salt)
}

// residentBytes is one event partition's share of StateMem.
func (n *Node) residentBytes() int { return int(n.cfg.StateMem / int64(n.cfg.Partitions)) }

// snappy reports whether Badger writes its tables compressed (ColdCompression).
func (c Config) snappy() bool { return c.ColdCompression == "snappy" }
