package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/backoff"
	"github.com/tally-dev/tally/pipeline/embedded"
	"github.com/tally-dev/tally/pipeline/natsconn"
	"github.com/tally-dev/tally/stages/cluster"
	"github.com/tally-dev/tally/stages/counter"
	"github.com/tally-dev/tally/stages/event"
	"github.com/tally-dev/tally/stages/flow"
	"github.com/tally-dev/tally/stages/metrics"
	"github.com/tally-dev/tally/stages/query"
	"github.com/tally-dev/tally/store"
	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/coldcache"
	"github.com/tally-dev/tally/store/graph"
	"github.com/tally-dev/tally/store/hot"
)

// DefaultLeaseTTL is how long a partition's lease outlives a dead owner (see
// cluster.DefaultLeaseTTL).
const DefaultLeaseTTL = cluster.DefaultLeaseTTL

// Node is a running Tally process. It owns some of the partitions of its prefix, each
// one's event stage and counters together: one process alone owns every partition;
// processes that join share them (see parts.go), and take over a dead one's (see
// backup.go).
type Node struct {
	cfg      Config
	subjects pipeline.Subjects
	log      *slog.Logger
	ns       *server.Server // nil when joining existing NATS
	nc       *nats.Conn     // the stages' streams: what they consume and publish
	js       jetstream.JetStream
	// readJS is js with the stages' Readers on connections of their own (flow.Spread):
	// one connection pulling for every partition is cut off by NATS as a slow consumer.
	readJS *flow.Spread
	// ctl renews the ownership leases and qc answers the queries, each on a connection
	// of its own: on nc, a renewal or a request would wait behind megabytes of events and
	// batches under load (a lease lost, a get timed out).
	ctl, qc *nats.Conn
	db      *cold.DB
	query   *query.Server
	runCtx  context.Context // the partitions' context, ended by Close
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	errOnce sync.Once
	err     error
	failed  chan struct{}

	EventStats   *event.Stats
	CounterStats counter.Stats
	budget       *counter.Budget
	coldBudget   *coldcache.Budget // the cold caches' ids, shared by the counter workers that hold any
	owners       *cluster.Owners
	takeover     atomic.Value     // where the last event stage taken over came from
	backups      *cluster.Backups // state backups; nil without BackupEvery
	mu           sync.RWMutex
	parts        map[int]*owned         // partitions owned here
	stopping     map[int]time.Time      // partitions whose stop is under way, and since when, under mu
	slowStops    map[int]bool           // those of them said to be slow (see stoppingParts), under mu
	starting     map[int]bool           // partitions whose start is under way, under mu
	retries      map[int]*startRetry    // partitions whose last start failed, under mu (see retryLater)
	claiming     map[int]*cluster.Lease // leases of partitions being started, under mu
	starts       sync.WaitGroup         // the starts under way (see rebalance)
	standbys     map[int]*standby       // warm copies of partitions owned elsewhere, under mu
	standbyStops map[int]bool           // partitions whose standby's stop is under way, under mu
	priming      chan struct{}          // one standby restores its backups at a time
	lastStart    atomic.Int64           // when a partition last started here (Unix ns)
	rounds       sync.Mutex             // one ownership round (or hand-over on Close) at a time
	kick         chan struct{}          // asks for a round now (see own)
	leaving      atomic.Bool            // Close is handing the partitions over: no more rounds
	waiting      map[int]*moveWait      // how long each partition held here has waited to move (see losePatience), under rounds
	// StandbyEvents counts what the standbys' event stages apply.
	StandbyEvents *event.Stats
	// Backups and BackupErrs count rounds of state backups stored in NATS and failed
	// backups; PartsRestored counts partitions taken over from another process by
	// restoring a backup, PartsWarm those taken over from a standby kept here.
	Backups, BackupErrs, PartsRestored, PartsWarm atomic.Int64
	// NATSDisconnects counts the times a connection of this process to NATS was lost.
	NATSDisconnects atomic.Int64
	// StandbyRestarts counts standbys that could not follow (they fell behind the
	// backups, or the log or events no longer reached back to them) and start again.
	StandbyRestarts atomic.Int64
	// SlowStops counts partitions whose stop here has taken longer than a lease TTL:
	// the others no longer leave them to this process (see stoppingParts).
	SlowStops   atomic.Int64
	metrics     *metrics.Metrics
	http        *http.Server
	metricsAddr string
	// backing, a test hook, is called as each backup of a partition begins, with the
	// backup's context.
	backing func(ctx context.Context, p int)
}

// Run runs a node until ctx ends or a partition fails.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	n, err := Start(ctx, cfg, log)
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-n.failed:
	}
	return n.Close()
}

// Start starts a node and returns once it owns what it can own now: its share of the
// partitions, all of them when alone. Another live process of the prefix makes it
// refuse (ErrOwned) unless cfg.Join.
func Start(ctx context.Context, cfg Config, log *slog.Logger) (_ *Node, err error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	mem, err := cfg.Mem(os.DirFS("/"))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	n := &Node{cfg: cfg, log: log, failed: make(chan struct{}), EventStats: event.NewStats(), budget: counter.NewBudget(mem.Hot), coldBudget: coldcache.NewBudget(cfg.ColdCache),
		parts: map[int]*owned{}, starting: map[int]bool{}, retries: map[int]*startRetry{}, claiming: map[int]*cluster.Lease{}, standbys: map[int]*standby{}, priming: make(chan struct{}, 1), StandbyEvents: event.NewStats(), kick: make(chan struct{}, 1), waiting: map[int]*moveWait{}}
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("cannot use data directory: %w", err)
	}
	if err := writable(cfg.DataDir); err != nil { // before the embedded NATS, which only times out
		return nil, err
	}
	url, conn, err := n.natsOptions()
	if errors.Is(err, natsconn.ErrConfig) || errors.Is(err, embedded.ErrAuth) {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if err != nil {
		return nil, err
	}
	if n.nc, err = n.connect(url, conn, "tallyd"); err != nil {
		return nil, err
	}
	if n.ctl, err = n.connect(url, conn, "tallyd-control"); err != nil {
		return nil, err
	}
	if n.qc, err = n.connect(url, conn, "tallyd-query"); err != nil {
		return nil, err
	}
	js, err := jetstream.New(n.nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		return nil, err
	}
	n.js = js
	read := 0
	n.readJS = flow.NewSpread(js, event.ReadBytes, func() (*nats.Conn, error) {
		read++ // under the Spread's lock
		return n.connect(url, conn, fmt.Sprintf("tallyd-read-%d", read))
	}, log)
	sc := cfg.streams()
	n.subjects = sc.Subjects
	replicas := cfg.Replicas // of the streams and buckets made new
	if replicas == 0 {
		replicas = autoReplicas(n.nc)
		sc.NewReplicas = replicas
	}
	if err := setup(ctx, js, sc, log); err != nil {
		if errors.Is(err, pipeline.ErrPartitions) || errors.Is(err, pipeline.ErrStreamConfig) {
			err = fmt.Errorf("%w: %w", ErrConfig, err)
		}
		return nil, err
	}
	if cfg.WrapPublisher != nil {
		log.Warn("internal publishes go through a test's wrapper, which may fail, delay, reorder and lose them on purpose (a test setting)")
	}
	ctlJS, err := jetstream.New(n.ctl)
	if err != nil {
		return nil, err
	}
	bucket := func(name string) cluster.Bucket {
		return cluster.Bucket{Name: name, Replicas: cfg.Replicas, NewReplicas: replicas}
	}
	if n.owners, err = cluster.Open(ctx, ctlJS, bucket(sc.Subjects.OwnersBucket()), cfg.DataDir, cfg.LeaseTTL); err != nil {
		return nil, bucketErr(err)
	}
	var obs jetstream.ObjectStore
	if cfg.BackupEvery > 0 {
		if obs, err = cluster.OpenState(ctx, js, bucket(sc.Subjects.StateBucket())); err != nil {
			return nil, bucketErr(err)
		}
	}
	if n.db, err = cold.Open(cold.Options{Dir: filepath.Join(cfg.DataDir, "state"), SyncWrites: cfg.SyncWrites, Logger: log, MemTableSize: memTable,
		NumMemtables: mem.Memtables, NumCompactors: mem.Compactors, BlockCacheSize: mem.BlockCache, IndexCacheSize: mem.IndexCache,
		Snappy: cfg.snappy(), Upgrade: graph.Upgrade}); err != nil {
		return nil, err
	}
	if obs != nil {
		n.backups = &cluster.Backups{JS: js, Obs: obs, DB: n.db, Subjects: sc.Subjects, Log: log, TmpDir: cfg.DataDir,
			// With the starts: a claim runs in one, and Close waits for them.
			SweepLater: func(sweep func()) { n.starts.Go(sweep) }}
	}
	partOf := func(id uint64) int { return pipeline.PartitionOf(pipeline.ID(id), cfg.Partitions) }
	if moved, err := graph.Migrate(n.db, cfg.Partitions, partOf); err != nil {
		return nil, err
	} else if moved > 0 {
		log.Info("moved the event stages' state under its partitions (upgrade)", "keys", moved)
	}
	if cfg.Snapshots {
		if err := os.MkdirAll(filepath.Join(cfg.DataDir, "snapshots"), 0o755); err != nil {
			return nil, fmt.Errorf("cannot use data directory: %w", err)
		}
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	n.runCtx, n.cancel = runCtx, cancel
	n.metrics = metrics.New(metrics.Source{Events: n.EventStats, StandbyEvents: n.StandbyEvents, Counters: &n.CounterStats, Hot: n.hot, Lags: n.lags,
		Owned: func() (int, bool) { return len(n.heldParts()), n.Events() },
		Moves: func() (int64, int64, int64, int64) {
			return n.Backups.Load(), n.BackupErrs.Load(), n.PartsRestored.Load(), n.PartsWarm.Load()
		},
		Standbys: func() int { return len(n.Standbys()) }, StandbyLag: n.StandbyLag, Partitions: cfg.Partitions, Streams: n.streams,
		NATS:      func() (int64, int) { return n.NATSDisconnects.Load(), len(n.conns()) + n.readJS.Conns() },
		SlowStops: n.SlowStops.Load, Refused: func() int { return len(n.Refused()) }})
	n.query = query.New(query.Config{Subjects: sc.Subjects, Families: cfg.Families, Partitions: cfg.Partitions, OnQuery: n.metrics.OnQuery, OnAudit: n.metrics.OnAudit, MaxLag: cfg.MaxLag, TopEvery: cfg.FlushInterval},
		n.qc, n.db, nil, log)
	if err := n.query.Start(); err != nil {
		return nil, err
	}
	if !cfg.Join { // alone: refuse before taking any partition
		if err := n.owners.Alone(ctx); err != nil {
			// A restart meets the same live process: a configuration error (exit 2).
			return nil, fmt.Errorf("%w: %w; to share the partitions with it and take them over when it stops, start this one with --join", ErrConfig, err)
		}
	}
	if err := n.renew(ctx); err != nil { // registers this process as a member
		return nil, err
	}
	if err := n.rebalance(ctx, true); err != nil {
		return nil, err
	}
	n.goRun(runCtx, n.own)
	n.goRun(runCtx, n.sampleAudits)
	if n.backups != nil {
		n.goRun(runCtx, n.backupLoop)
	}
	if cfg.Metrics != "" {
		if err := n.serveHTTP(cfg.Metrics); err != nil {
			return nil, err
		}
	}
	// The one line a start prints at INFO: what this process owns. Each partition's
	// loading is at DEBUG.
	log.Info("tally running", "nats", natsconn.Redacted(url), "partitions", spans(n.Parts()), "of", cfg.Partitions,
		"families", len(cfg.Families), "data", cfg.DataDir, "max-mem", Bytes(mem.Budget), "hot-max-mem", Bytes(mem.Hot))
	log.Debug("memory", "split", mem)
	return n, nil
}

// bucketErr marks a bucket setting that would break Tally a configuration error: a
// restart finds the bucket as it is.
func bucketErr(err error) error {
	if errors.Is(err, cluster.ErrBucketConfig) {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return err
}

// spans writes sorted partition numbers as ranges: 0-3,6,9-15.
func spans(ps []int) string {
	ps = slices.Sorted(slices.Values(ps))
	var b strings.Builder
	for i := 0; i < len(ps); {
		j := i
		for j+1 < len(ps) && ps[j+1] == ps[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(ps[i]))
		if j > i {
			b.WriteString("-" + strconv.Itoa(ps[j]))
		}
		i = j + 1
	}
	if b.Len() == 0 {
		return "none"
	}
	return b.String()
}

func newTable(kind string) (func(int) store.Table, error) {
	switch kind {
	case "", "hot":
		return func(f int) store.Table { return hot.New(f) }, nil
	case "map":
		return func(f int) store.Table { return store.NewMap(f) }, nil
	}
	return nil, fmt.Errorf("unknown table %q (hot or map)", kind)
}

// counterConfig is the configuration of every counter worker but its family and partition.
func (n *Node) counterConfig() counter.Config {
	mk, _ := newTable(n.cfg.Table)
	cc := counter.Config{Subjects: n.subjects, FlushInterval: n.cfg.FlushInterval, NewTable: mk, OnFlush: n.metrics.OnFlush, PurgeEvery: n.cfg.PurgeEvery,
		OnSnapshot: n.metrics.OnSnapshot, ColdAge: n.cfg.ColdAge, IDEpoch: n.cfg.IDEpoch, Budget: n.budget,
		ColdBudget: n.coldBudget, SnapshotMin: n.cfg.SnapshotMin, BoundPurge: n.cfg.BackupEvery > 0}
	if n.cfg.Snapshots {
		cc.SnapshotDir = filepath.Join(n.cfg.DataDir, "snapshots")
	}
	return cc
}

// goRun runs a partition; a partition that fails stops the node (a restart resumes it
// from its last commit) rather than leaving it silently dead.
func (n *Node) goRun(ctx context.Context, run func(context.Context) error) {
	n.wg.Go(func() {
		if err := run(ctx); err != nil && ctx.Err() == nil {
			n.fail(err)
		}
	})
}

func (n *Node) fail(err error) {
	if diskError(err) {
		err = fmt.Errorf("cannot write to the data directory %s (disk full, file too large or not writable); free space or fix it and restart, nothing is lost: %w", n.cfg.DataDir, err)
	}
	n.errOnce.Do(func() {
		n.err = err
		n.log.Error("partition failed; stopping", "err", err)
		close(n.failed)
	})
}

// setup sets the streams up, retrying for a while: a NATS cluster that is still forming
// (no JetStream leader yet, peers not all online) refuses for a few seconds what it
// accepts afterwards. A wrong partition count or a stream setting that would break Tally
// is final.
func setup(ctx context.Context, js jetstream.JetStream, sc pipeline.StreamConfig, log *slog.Logger) error {
	deadline := time.Now().Add(30 * time.Second)
	wait := backoff.New(250*time.Millisecond, 2*time.Second)
	for {
		err := pipeline.Setup(ctx, js, sc)
		if err == nil || errors.Is(err, pipeline.ErrPartitions) || errors.Is(err, pipeline.ErrStreamConfig) || time.Now().After(deadline) {
			return err
		}
		log.Warn("cannot set up streams yet; retrying", "err", err)
		if wait.Wait(ctx) != nil {
			return err
		}
	}
}

// HotBytes is the RAM the counter tables hold, as of their last checkpoints.
func (n *Node) HotBytes() int64 {
	var sum int64
	for _, v := range n.hot() {
		sum += v[1]
	}
	return sum
}

// writable checks that the data directory and the directories in it can be written,
// saying which cannot.
func writable(dir string) error {
	dirs := []string{dir}
	for _, sub := range []string{"state", "nats", "snapshots"} {
		if fi, err := os.Stat(filepath.Join(dir, sub)); err == nil && fi.IsDir() {
			dirs = append(dirs, filepath.Join(dir, sub))
		}
	}
	for _, d := range dirs {
		f, err := os.CreateTemp(d, ".tally-probe-*")
		if err != nil {
			return fmt.Errorf("data directory %s is not writable: %w", d, err)
		}
		f.Close()
		_ = os.Remove(f.Name())
	}
	return nil
}

// diskError reports whether err is a failure to write the disk. Badger flattens the
// errors it wraps into text, so the text is looked at too.
func diskError(err error) bool {
	for _, e := range []error{syscall.ENOSPC, syscall.EFBIG, syscall.EDQUOT, syscall.EROFS, syscall.EACCES, syscall.EIO} {
		if errors.Is(err, e) {
			return true
		}
	}
	msg := err.Error()
	for _, s := range []string{"no space left on device", "file too large", "disk quota exceeded", "read-only file system", "permission denied", "input/output error"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// hot sums the RAM tables of each family.
func (n *Node) hot() map[string][2]int64 {
	out := map[string][2]int64{}
	for _, pt := range n.heldParts() {
		for _, w := range pt.workers {
			fam, _ := w.Partition()
			v := out[fam]
			out[fam] = [2]int64{v[0] + w.Entries(), v[1] + w.Bytes()}
		}
	}
	return out
}

// MetricsAddr is where /metrics is served ("" when disabled).
func (n *Node) MetricsAddr() string {
	return n.metricsAddr
}

// ClientURL is the NATS URL clients use to reach this node. It carries the password
// of a URL given with user information: log natsconn.Redacted(ClientURL()), never it.
func (n *Node) ClientURL() string { return n.nc.ConnectedUrl() }

// Failed is closed when a partition failed and the node must stop.
func (n *Node) Failed() <-chan struct{} { return n.failed }

// Close hands the partitions over, to warm standbys where it can (see leave), stops
// queries and the partitions, hands what is left over (backed up, their leases
// released), and closes Badger and NATS.
func (n *Node) Close() error {
	if n.http != nil {
		_ = n.http.Close()
	}
	if n.runCtx != nil && n.err == nil && n.standbysOn() {
		n.leave()
	}
	if n.query != nil {
		n.query.Stop()
	}
	if n.cancel != nil {
		n.cancel()
	}
	n.wg.Wait()
	n.starts.Wait() // the partitions they started are stopped below
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if n.owners != nil { // the others plan without this process from their next round
		_ = n.owners.Leave(ctx)
	}
	n.stopStandbys()
	for _, pt := range n.heldParts() {
		how := leaveLost
		if n.err == nil {
			how = leaveCold
		}
		n.stopPart(pt, how)
	}
	var errs []error
	if n.js != nil {
		select { // change events published by the last flushes
		case <-n.js.PublishAsyncComplete():
		case <-time.After(5 * time.Second):
			n.log.Warn("some change events were not acknowledged before shutdown")
		}
	}
	if n.readJS != nil {
		n.readJS.Close()
	}
	for _, c := range n.conns() {
		if c != nil {
			c.Close()
		}
	}
	if n.db != nil {
		errs = append(errs, n.db.Close())
	}
	if n.ns != nil {
		n.ns.Shutdown()
		n.ns.WaitForShutdown()
	}
	errs = append(errs, n.err)
	return errors.Join(errs...)
}
