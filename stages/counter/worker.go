package counter

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/stages/flow"
	"github.com/tally-dev/tally/stages/hop"
	"github.com/tally-dev/tally/store"
	"github.com/tally-dev/tally/store/checkpoint"
	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/coldcache"
)

// Config configures one counter partition.
type Config struct {
	Family    pipeline.Family
	Partition int
	Subjects  pipeline.Subjects
	// FlushInterval is the coalescing window: changes are written and announced at most
	// this often.
	FlushInterval time.Duration
	// MaxDirty flushes early when this many ids changed, bounding a transaction.
	MaxDirty int
	// MaxChange is the most ids in one change message.
	MaxChange int
	// NewTable makes the in-RAM table (store.NewMap when nil).
	NewTable func(fields int) store.Table
	// OnFlush, when set, is told the size and duration of every checkpoint.
	OnFlush func(ids int, took time.Duration)
	// PurgeEvery is how often the deltas a checkpoint covers are purged from the stream:
	// a restart resumes after the checkpoint, and a re-sent batch is recognised by its
	// sequence, not by the stream, so they are never needed again. 0 never purges.
	PurgeEvery time.Duration
	// BoundPurge purges only what SetPurgeLimit allows as well: state backed up to NATS.
	BoundPurge bool
	// Valid, when set, says whether the partition is certainly still this process's (its
	// lease): a worker that may have lost it answers no query (ErrNotOwned), publishes
	// no change event and purges nothing until it is stopped — another process's
	// counts are the true ones.
	Valid func() bool
	// Publisher is what change events are published through (the JetStream context when
	// nil): the chaos test's hoptest.FaultyPublisher fails, delays and reorders them.
	Publisher hop.Publisher
	// AfterCheckpoint, a test hook, is called after each checkpoint commits and before
	// its change events are sent; an error stops the worker there, as a crash would.
	AfterCheckpoint func() error

	// The rest applies to a table that can move ids to the cold tier (hot.Table).

	// SnapshotDir, when set, holds a snapshot of the table, rewritten once the journal
	// since the last one holds more than SnapshotMin entries and a quarter of the table
	// (and on a clean stop), so a restart loads RAM in one read instead of reading every
	// stored counter.
	SnapshotDir string
	SnapshotMin int
	// OnSnapshot, when set, is told the size and duration of every snapshot written.
	OnSnapshot func(bytes int, took time.Duration)
	// ColdAge moves ids older than this (by their snowflake time) out of RAM; 0 never.
	// AgeEvery is how often that is looked at (default a minute).
	ColdAge  time.Duration
	AgeEvery time.Duration
	// IDEpoch is the Unix time in ms that the snowflake time of an id (id >> 22) counts
	// from.
	IDEpoch int64
	// Budget bounds the RAM of the hot tables of all workers sharing it; nil is
	// unbounded.
	Budget *Budget
	// ColdCache is the most cold ids whose counters are kept in RAM after a read, unless
	// ColdBudget is set: a process's budget its workers' caches share.
	ColdCache  int
	ColdBudget *coldcache.Budget
}

// Stats counts what workers did; safe to read from any goroutine and shareable.
type Stats struct {
	Batches    atomic.Int64 // delta batches applied
	Duplicates atomic.Int64 // delta batches skipped as already applied (or held)
	Deltas     atomic.Int64 // deltas applied
	Flushes    atomic.Int64
	Flushed    atomic.Int64 // ids written by flushes
	Bad        atomic.Int64 // undecodable delta messages (dead-lettered)
	ChangeErrs atomic.Int64 // change events that could not be published
	// ChangesFenced counts change events refused because another owner announced after
	// this process's lease lapsed (each also in ChangeErrs): a worker paused past its TTL.
	ChangesFenced atomic.Int64

	// Peeked counts reads (gets, windowed gets, tops, stale reads) done by their asker
	// while the worker's goroutine waited (Worker.peek); Queued those handed to it (a
	// worker busy, or an id in the cold tier).
	Peeked atomic.Int64
	Queued atomic.Int64

	ColdReads    atomic.Int64 // ids read from the cold tier (Badger)
	ColdHits     atomic.Int64 // cold ids answered by the cold cache
	Evicted      atomic.Int64 // groups moved out of RAM
	EvictedIDs   atomic.Int64 // ids in them
	Snapshots    atomic.Int64
	SnapshotErrs atomic.Int64
	Restored     atomic.Int64 // partitions loaded from a snapshot and its journal

	// Hop counts the receiving end of the deltas' hop: batches held above a gap now and
	// gaps given up.
	Hop hop.InStats
}

// queryQueue is how many queries wait for a worker without blocking their senders: a
// request hands each of its partitions its ids, then waits for them all (Send).
const queryQueue = 64

// Worker owns one (family, partition).
type Worker struct {
	cfg     Config
	js      jetstream.JetStream
	behind  *flow.Meter // how far the partition is behind its deltas (health, metrics, stale reads)
	db      *cold.DB
	log     *slog.Logger
	stats   *Stats
	queries chan *query   // queued, up to queryQueue, so that a request asks every partition before it waits
	stopped chan struct{} // closed as Run returns: queries are answered ErrStopped
	// view is what a query reads (the table, the cold tier's set, the window table and
	// the kept tops): Run holds it but where it answers queries — waiting for work, a
	// checkpoint or a snapshot — so a read's asker may read them there itself (peek),
	// as Run would answer it.
	view sync.Mutex
	role string // the role its goroutine's profile labels say (label)

	ready      atomic.Bool
	pos        atomic.Uint64
	purgeLimit atomic.Uint64
	entries    atomic.Int64 // ids in the table, as of the last flush
	holding    atomic.Int64 // delta batches held above a gap now (see Lag)
	bytes      atomic.Int64 // the table's RAM, as of the last flush, when it can tell

	table     store.Table
	cp        checkpoint.Checkpoint
	in        hop.In              // the deltas' hop; its Marks are cp.Marks
	store     heldStore           // the payloads the hop holds
	held      pipeline.DeltaBatch // a held batch being applied
	chg       changes             // the outbox of change events
	owner     uint32              // this run's number in the ids of its change events
	lastPos   uint64              // the position of the last checkpoint committed
	purgedTo  atomic.Uint64       // deltas below this sequence are purged
	purging   atomic.Bool         // a purge is under way
	purges    sync.WaitGroup
	lookups   sync.WaitGroup // of the last change event (see lookUp)
	lastPurge time.Time
	trimmed   time.Time // when trimStandby last asked NATS
	changed   int       // deltas applied since the last flush: at least the dirty ids
	scratch   []uint64
	misses    coldMisses         // prefetch's, kept from batch to batch
	flushed   []checkpoint.Entry // flush's entries, emptied, for the next flush to fill

	// The cold tier, when the table is tiered.
	tier        tiered
	cold        coldSet
	cache       *coldcache.Cache
	stored      *checkpoint.Stored // reads what the cold tier holds
	lastAged    time.Time
	reported    int64      // bytes last told to the budget
	snapSeq     uint64     // the checkpoint the last durable snapshot was taken at
	snapID      uint64     // its id (see Checkpoint.Snap), 0 when none is known
	writing     snapResult // the snapshot being written, zero when none (snapping)
	snapDone    chan snapResult
	staleBehind staleBehind // see Stale
	journaled   int         // entries journaled since the last snapshot
	snapDue     bool        // a snapshot is wanted at the next checkpoint
	stopping    bool        // the stop's checkpoint, taken for its snapshot if need be

	win  windows // the windowed counts
	tops tops    // the tops asked lately, ranked again at each flush tick
}

// queryPool keeps the queries of gets (Send, SendWindow), each given back once its
// answer has been waited for, with its channel and its wait: a 20-id get asks some 12
// partitions, and each made a query, a channel and a closure (35 of its 111
// allocations, BenchmarkGet20).
var queryPool = sync.Pool{New: func() any { return newQuery() }}

// New returns a worker; Run starts it.
func New(cfg Config, js jetstream.JetStream, db *cold.DB, log *slog.Logger, stats *Stats) *Worker {
	if cfg.FlushInterval <= 0 {
		cfg.FlushInterval = 100 * time.Millisecond
	}
	if cfg.MaxDirty <= 0 {
		cfg.MaxDirty = 8192
	}
	if cfg.MaxChange <= 0 {
		cfg.MaxChange = 4096
	}
	if cfg.NewTable == nil {
		cfg.NewTable = func(fields int) store.Table { return store.NewMap(fields) }
	}
	if cfg.SnapshotMin <= 0 {
		cfg.SnapshotMin = 1 << 16
	}
	if cfg.AgeEvery <= 0 {
		cfg.AgeEvery = time.Minute
	}
	cache := coldcache.New(cfg.ColdCache)
	if cfg.ColdBudget != nil {
		cache = cfg.ColdBudget.Cache()
	}
	return &Worker{
		cfg: cfg, js: js, db: db, stats: stats, queries: make(chan *query, queryQueue), stopped: make(chan struct{}), snapDone: make(chan snapResult, 1),
		owner:  rand.Uint32(),
		cache:  cache,
		log:    log.With("stage", "counter", "family", cfg.Family.Name, "partition", cfg.Partition),
		behind: flow.NewMeter(js, cfg.Subjects.DeltasStream(), cfg.Subjects.Delta(cfg.Family.Name, cfg.Partition)),
	}
}

// Ready reports whether the worker has loaded its checkpoint and is consuming.
func (w *Worker) Ready() bool { return w.ready.Load() }

// Lag is how far the partition is behind its deltas, in messages (Behind's Msgs).
func (w *Worker) Lag(ctx context.Context) (uint64, error) {
	b, err := w.Behind(ctx)
	return b.Msgs, err
}

// Behind is how far the partition is behind its deltas, for health and metrics: the
// sequences of the deltas stream between the last delta applied and the newest one for
// this partition, and the age of the oldest not applied. Delta batches held above a gap
// count too: the position has passed them, but they are not applied, and a partition
// that holds some has not counted everything it was sent (health said caught up while a
// gap held a sender's every later batch).
func (w *Worker) Behind(ctx context.Context) (flow.Behind, error) {
	b, err := w.behind.Behind(ctx, w.pos.Load(), time.Now())
	b.Msgs += uint64(max(w.holding.Load(), 0))
	return b, err
}

// Entries is the number of ids in RAM as of the last flush.
func (w *Worker) Entries() int64 { return w.entries.Load() }

// Bytes is the RAM the table holds as of the last flush (0 if the table cannot tell).
func (w *Worker) Bytes() int64 { return w.bytes.Load() }

// Position is the last DELTAS sequence applied.
func (w *Worker) Position() uint64 { return w.pos.Load() }

// Run loads the checkpoint, replays the stream after it, and applies deltas until ctx
// ends, when it flushes once more. It answers queries until it returns, its last
// checkpoint and snapshot included: a partition handed over is served by its giver
// until the giver's workers have stopped, and the taker has nothing to wait for but
// the giver's lease. Run is called at most once.
func (w *Worker) Run(ctx context.Context) error {
	w.view.Lock()
	defer w.view.Unlock()
	defer close(w.stopped)
	defer w.cache.Close() // its share of a budget to the others
	w.label(ctx)
	// The batches the loaded marks hold are counted in Stats.Hop.Held until Close.
	defer w.in.Close()
	if err := w.load(); err != nil {
		return err
	}
	r, err := flow.Read(ctx, w.js, w.cfg.Subjects.DeltasStream(), w.cfg.Subjects.Delta(w.cfg.Family.Name, w.cfg.Partition), w.cp.Pos, flow.Buffer{Msgs: 1024}, w.log)
	if err != nil {
		return err
	}
	defer r.Stop()
	w.behind.Track(r, &w.pos)
	defer w.behind.Track(nil, nil)
	w.ready.Store(true)
	defer w.ready.Store(false)
	defer w.unaccount()
	defer w.purges.Wait()
	defer w.lookups.Wait()
	defer w.waitSnapshot()
	// A release cut by a checkpoint and a stop: what its marks hold that is next.
	if err := w.release(ctx); err != nil {
		return err
	}
	tick := time.NewTicker(w.cfg.FlushInterval)
	defer tick.Stop()
	batch := make([]jetstream.Msg, 0, 1024)
	var b pipeline.DeltaBatch
	for {
		if ctx.Err() != nil { // before what else is ready: a stop waits for no more work
			return w.stop(context.WithoutCancel(ctx))
		}
		w.view.Unlock() // waiting: a get may be read here (peek); every case takes it back
		select {
		case <-ctx.Done():
			w.view.Lock()
			return w.stop(context.WithoutCancel(ctx))
		case q := <-w.queries:
			w.view.Lock()
			w.answer(q)
		case r := <-w.snapDone:
			w.view.Lock()
			w.snapFinished(r)
		case <-tick.C:
			w.view.Lock()
			w.label(ctx)
			if err := w.flush(ctx); err != nil {
				return err
			}
			if w.cfg.Valid == nil || w.cfg.Valid() {
				// A purge skipped while the last one was under way: an idle partition
				// takes no checkpoint to try it again (TestDeltasPurgedAfterCheckpoint
				// waited 30 s for a delta to go, in a CI run).
				w.purge(ctx)
			}
			w.sendChanges(ctx) // the outbox keeps what is not sent, for the next call
			w.evict()
			w.cache.Tick()
			w.refreshTops(time.Now())
		case m := <-r.C:
			w.view.Lock()
			batch = r.Drain(append(batch[:0], m), cap(batch))
			for _, m := range batch {
				if ctx.Err() != nil { // the rest is read again at the next start
					break
				}
				if err := w.apply(ctx, m, &b); err != nil {
					return err
				}
				if w.changed >= w.cfg.MaxDirty {
					if err := w.flush(ctx); err != nil {
						return err
					}
				}
				w.answerWaiting()
			}
			clear(batch) // the messages are not kept until the next batch
			// Acknowledgements of change events come in while deltas are applied: the
			// next checkpoint's events wait for them.
			w.sendChanges(ctx) // the outbox keeps what is not sent, for the next call
		case ack := <-w.chg.ok:
			w.view.Lock()
			// One change event at a time: the next goes as this one is stored.
			w.changeSettled(ctx, ack, nil)
			w.sendChanges(ctx)
		case err := <-w.chg.failed:
			w.view.Lock()
			w.changeSettled(ctx, nil, err)
			w.sendChanges(ctx)
		case l := <-w.chg.asking:
			w.view.Lock()
			w.lookedUp(l)
			w.sendChanges(ctx)
		}
	}
}

// load fills the table from the snapshot and the journal after it, or else from every
// stored counter, and takes the checkpoint's position and watermarks.
func (w *Worker) load() error {
	fields := len(w.cfg.Family.Fields)
	w.scratch = make([]uint64, fields)
	w.table = w.cfg.NewTable(fields)
	w.tier, _ = w.table.(tiered)
	w.stored = checkpoint.NewStored(w.cfg.Family.Name, w.cfg.Partition)
	cp, err := checkpoint.LoadCheckpoint(w.db, w.cfg.Family.Name, w.cfg.Partition)
	if err != nil {
		return err
	}
	w.cp, w.lastPos = cp, cp.Pos
	if err := w.loadChanges(); err != nil {
		return err
	}
	if err := w.loadWindows(); err != nil {
		return err
	}
	w.store = heldStore{db: w.db, family: w.cfg.Family.Name, p: w.cfg.Partition}
	if err := w.dropOrphans(); err != nil {
		return err
	}
	w.in = hop.In{Marks: cp.Marks, Store: &w.store, Stats: &w.stats.Hop, Holding: &w.holding, Log: w.log}
	if n, b := w.in.Held(); n > 0 { // which also counts them in Stats.Hop
		w.log.Info("delta batches held above a gap", "batches", n, "bytes", b)
	}
	w.pos.Store(cp.Pos)
	start, source := time.Now(), "snapshot"
	if w.loadSnapshot(cp) {
		w.stats.Restored.Add(1)
	} else {
		source = "counters"
		// Ids past ColdAge stay in the cold tier.
		w.cold.below = w.ageLimit()
		err := checkpoint.LoadCounters(w.db, w.cfg.Family.Name, w.cfg.Partition, fields, func(id uint64, c []uint64) {
			if !w.isCold(id) {
				w.table.Put(id, c)
			}
		})
		if err != nil {
			return err
		}
		w.snapDue = true // at the first checkpoint, so the next start is fast
	}
	w.table.ClearDirty() // what was loaded is already checkpointed
	w.log.Debug("loaded", "source", source, "ids", w.table.Len(), "journaled", w.journaled, "checkpoint", cp.Seq, "took", time.Since(start))
	if w.tier != nil {
		w.tier.SetTick(now())
		w.account()
	}
	w.entries.Store(int64(w.table.Len()))
	return nil
}

// stop flushes once more and, with snapshots on, writes one (after a checkpoint that
// names it), so the next start loads RAM from it without a journal to replay.
func (w *Worker) stop(ctx context.Context) error {
	if err := w.flush(ctx); err != nil {
		return err
	}
	if err := w.serving(func() error { return w.drainChanges(ctx, 2*time.Second) }); err != nil {
		return err
	}
	w.waitSnapshot()
	if w.snapshots() && (w.journaled > 0 || w.snapDue) {
		w.snapDue, w.stopping = true, true // and a checkpoint that names it
		if err := w.flush(ctx); err != nil {
			return err
		}
		w.waitSnapshot()
	}
	return nil
}

// waitSnapshot waits for the snapshot being written, answering queries meanwhile (a
// stop's: a snapshot of millions of ids takes seconds under load).
func (w *Worker) waitSnapshot() {
	for w.snapping() {
		w.view.Unlock()
		select {
		case r := <-w.snapDone:
			w.view.Lock()
			w.snapFinished(r)
		case q := <-w.queries:
			w.view.Lock()
			w.answer(q)
		}
	}
}

func (w *Worker) apply(ctx context.Context, m jetstream.Msg, b *pipeline.DeltaBatch) error {
	md, err := m.Metadata()
	if err != nil {
		return fmt.Errorf("delta without metadata: %w", err)
	}
	w.cp.Pos = md.Sequence.Stream
	w.pos.Store(w.cp.Pos)
	if err := pipeline.DecodeDeltaBatch(m.Data(), b); err != nil {
		w.deadLetter(m, md.Sequence.Stream, err)
		return w.fill(ctx, m)
	}
	return w.accept(ctx, m.Data(), b)
}

// keepEntries keeps the slice of a flush's entries, emptied, for the next flush, unless
// a flush far larger than most made it.
func (w *Worker) keepEntries(entries []checkpoint.Entry) {
	clear(entries) // not to keep the counts and records they point to alive
	if cap(entries) > 4*w.cfg.MaxDirty {
		entries = nil
	}
	w.flushed = entries[:0]
}

// flush writes every changed id with the position and watermarks in one transaction,
// then announces the new values. A position moved by batches that changed no count
// (duplicates, batches held above a gap) is written too: a standby's stored state must
// reflect its owner's backup as soon as it has read that far, or its partition is
// restored from the backup rather than taken over warm.
func (w *Worker) flush(ctx context.Context) error {
	if w.changed == 0 && len(w.win.gone) == 0 && w.cp.Pos == w.lastPos && !w.stopping {
		return nil
	}
	entries := w.flushed
	var block []uint64 // the entries' counts, many to an allocation (what a checkpoint's changes keep)
	w.table.Dirty(func(id uint64, counts []uint64) bool {
		if len(block)+len(counts) > cap(block) {
			block = make([]uint64, 0, max(1024, len(counts)))
		}
		n := len(block)
		block = append(block, counts...)
		entries = append(entries, checkpoint.Entry{ID: id, Counts: block[n:len(block):len(block)]})
		return true
	})
	start := time.Now()
	snaps := w.snapshots()
	writing := w.writing
	snapID, snapNow := w.snapNext(len(entries))
	if snapNow {
		writing = snapResult{seq: w.cp.Seq + 1, id: snapID}
	}
	j := checkpoint.Journal{Append: snaps, DropThrough: w.snapSeq, Snap: w.snapID, Writing: writing.id, WritingSeq: writing.seq}
	chg := w.changeEntries(w.cp.Seq+1, entries)
	changed := len(entries)
	entries, gone, err := w.windowed(entries)
	if err != nil {
		return err
	}
	w.cp.WindowTop = w.win.top
	err = w.serving(func() error {
		err := checkpoint.SaveCheckpoint(w.db, w.cfg.Family.Name, w.cfg.Partition, entries, &w.cp, j, checkpoint.Changes{Put: chg, Published: w.chg.published, Released: w.store.released})
		if err == nil && w.cfg.AfterCheckpoint != nil {
			err = w.cfg.AfterCheckpoint()
		}
		return err
	})
	if err != nil {
		return err
	}
	w.keepEntries(entries)
	w.chg.published, w.store.released = nil, nil
	w.windowsSaved(gone)
	w.lastPos = w.cp.Pos
	if len(chg) > 0 {
		w.chg.pending = append(w.chg.pending, chg)
	}
	if w.cfg.OnFlush != nil {
		w.cfg.OnFlush(changed, time.Since(start))
	}
	w.cold.zeroed = nil // the checkpoint deleted them from the cold tier
	if w.tier != nil {
		w.account()
	} else {
		w.entries.Store(int64(w.table.Len()))
	}
	w.stats.Flushes.Add(1)
	w.stats.Flushed.Add(int64(changed))
	owned := w.cfg.Valid == nil || w.cfg.Valid()
	if owned {
		w.sendChanges(ctx) // the outbox keeps what is not sent, for the next call
	}
	w.table.ClearDirty()
	w.changed = 0
	if owned {
		w.purge(ctx)
	} else {
		w.trimStandby(ctx)
	}
	if snaps {
		w.journaled += changed
	}
	if snapNow {
		w.startSnapshot(snapID)
	}
	return nil
}

// label gives the worker's goroutine the profile labels of the role it runs in now
// (flow.Label): a standby's workers go on as the owner's when it takes over.
func (w *Worker) label(ctx context.Context) {
	role := flow.RoleOwner
	if w.cfg.Valid != nil && !w.cfg.Valid() {
		role = flow.RoleStandby
	}
	if role != w.role {
		w.role = role
		flow.Label(ctx, "counter", w.cfg.Family.Name, w.cfg.Partition, role)
	}
}

// Partition is the worker's family and partition.
func (w *Worker) Partition() (family string, p int) { return w.cfg.Family.Name, w.cfg.Partition }
