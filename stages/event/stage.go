package event

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/stages/flow"
	"github.com/tally-dev/tally/stages/hop"
	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/delivery"
	"github.com/tally-dev/tally/store/graph"
	"github.com/tally-dev/tally/store/stagelog"
	"github.com/tally-dev/tally/store/unread"
	"github.com/tally-dev/tally/store/viewers"
)

// Config configures one event-stage partition.
type Config struct {
	Partition  int
	Partitions int
	Subjects   pipeline.Subjects
	Families   pipeline.Families
	// MaxBatch is the most messages committed in one transaction. A transaction that
	// Badger finds too big (or whose log record is larger than NATS accepts) commits the
	// messages that fit and goes on with the rest; a message that alone does not fit is
	// dead-lettered. 1024 when 0: producers sending one event a message fill
	// transactions of ~350 events with it, ~130 with 256.
	MaxBatch int
	// FanoutLimit is the most followers a post is pushed to; a post of an author with
	// more is pulled by readers instead.
	FanoutLimit int
	// Log stores every transaction in the partition's log before it commits, and makes
	// Run replay the records its state lacks first (see stagelog.Record); the log then
	// keeps the outbox, which is not written to Badger (outbox.go). tallyd always logs;
	// off, the outbox is kept in Badger.
	Log bool
	// LogWrites has each log record carry what its transaction wrote in Badger
	// (stagelog.Record.Writes), when that fits in the record: a standby (Mirror)
	// applies it rather than executing the record's events again. Off, or for a
	// record it did not fit in, a standby executes the events.
	LogWrites bool
	// PurgeLog, for a stage that logs where no backups purge its log (a process that
	// owns every partition: the log is then only where its outbox is kept), drops the
	// records its committed state no longer needs (stagelog.State.LogKept) as it goes.
	PurgeLog bool
	// Owner names this ownership of the partition (the node id and the lease revision)
	// in the log's message ids, so that another owner's record is never taken for a
	// re-sent one of ours.
	Owner string
	// Valid, when set, is asked before every log append: false means the partition may
	// have another owner by now, and the stage stops.
	Valid func() bool
	// Publisher sends the outbox (the JetStream context when nil); tests put faults in it.
	Publisher hop.Publisher
	// ResidentBytes is the RAM the partition keeps of what its events read of its state
	// (reader states and like records, graph.Resident, three quarters; the sketches of
	// posts' viewers, viewers.Cache, a quarter): 0 keeps none.
	ResidentBytes int
	// MaxPayload is the largest message NATS accepts (the connection's when 0).
	MaxPayload int
	// Windows sends, with the deltas, the changes by minute the windowed counts are made
	// of (pipeline.WindowDelta). Counter workers of versions before 1.4 cannot decode
	// such batches: on only once every tallyd runs 1.4.
	Windows bool
}

// Stats counts what a stage did; safe to read from any goroutine.
type Stats struct {
	Messages  atomic.Int64 // messages consumed
	Events    atomic.Int64 // events applied
	Unchanged atomic.Int64 // relation events that changed nothing (a second like, an unlike of nothing)
	Forgotten atomic.Int64 // relation events past rel.MaxLater that made a relation forget an older "on"
	Dead      atomic.Int64 // messages (or events of a batch) dead-lettered
	Forwarded atomic.Int64 // events handed to another partition (relation events of a batch, notice copies)
	Deltas    atomic.Int64 // deltas published after coalescing
	Txns      atomic.Int64 // transactions committed
	LikeKeys  atomic.Int64 // Badger keys the committed likes and unlikes set or deleted (graph.Likes)
	Splits    atomic.Int64 // transactions cut short because the next messages did not fit
	Retries   atomic.Int64 // outbox publish retries
	Pushed    atomic.Int64 // feed counters a post was pushed to
	Pulled    atomic.Int64 // posts left for readers to pull
	HopDups   atomic.Int64 // hop batches from another partition skipped as applied already
	HopsHeld  atomic.Int64 // hop batches held above a gap now
	HopGaps   atomic.Int64 // gaps in another partition's hop batches given up (logged at error)
	// Log records a standby applied from the writes they carry, and those whose events
	// it executed (Mirror); records logged without their transaction's writes because
	// those did not fit (Config.LogWrites).
	MirroredWrites, MirroredEvents, WritesLeftOut atomic.Int64
	// Log records a new owner's replay applied from the writes they carry (replay).
	ReplayedWrites atomic.Int64
	// Resident is what the stages keep in RAM of their users' state (graph.Resident,
	// --state-mem): its bytes now, and the reads it answered and those that went to Badger.
	ResidentBytes, ResidentHits, ResidentMisses atomic.Int64
	// ByType counts events applied per type; made by NewStats, read-only map.
	ByType map[string]*atomic.Int64
}

// NewStats returns Stats with a counter per event type.
func NewStats() *Stats {
	st := &Stats{ByType: map[string]*atomic.Int64{}}
	for _, t := range pipeline.Types() {
		st.ByType[t] = new(atomic.Int64)
	}
	return st
}

// Stage is one event partition. Run owns all of its state.
type Stage struct {
	cfg    Config
	js     jetstream.JetStream
	db     *cold.DB
	log    *slog.Logger
	stats  *Stats
	fields *fields
	keys   []pipeline.ID // an id routing to each partition, for hops
	out    *hop.Outbox
	pulled *unread.Pulled                      // authors whose posts this partition's readers pull
	res    *graph.Resident[unread.ReaderState] // what events read of the state, in RAM (see graph.Resident)
	seen   *viewers.Cache                      // the sketches of the posts viewed lately, in RAM
	likes  *graph.Likes                        // reused by every transaction (graph.Likes.Reset)
	dec    pipeline.EventDecoder               // a message's events, good until the next is decoded
	fwd    []hopOut                            // by partition: what a transaction forwards there (reused)
	// a log record's writes (Config.LogWrites) as the transaction wrote them, and
	// compressed (stagelog.Record.Writes): room reused
	writes, packed []byte
	// behind and logBehind measure how far the stage is behind its events and, as a
	// standby, its owner's log (health, metrics, warmth: asked often).
	behind, logBehind *flow.Meter

	pos atomic.Uint64 // last stream sequence committed
	// now is the Unix minute the newest message committed was stored at, with windows
	// on: where a transaction that consumes no message starts from.
	now       uint32
	logged    atomic.Uint64 // last log record a following stage applied (see LogBehind)
	busy      atomic.Bool   // from taking messages until their outbox is acknowledged
	holding   atomic.Int64  // hop batches st holds above a gap, as counted in stats (and Lag)
	st        stagelog.State
	published []uint64 // outbox entries acknowledged, deleted in the next transaction
	// stored is the greatest outbox entry Badger may hold (see outbox.go): entries above
	// it are in the log alone.
	stored uint64
	inLog  []logged // the log records holding entries possibly not stored yet, oldest first
	// what Outbox reports, as of the last commit (see noteCommitted)
	outMu              sync.Mutex
	outLast, outOldest uint64
	budget             int              // held hop batches the next transaction may release: halved when too many did not fit
	warned             time.Time        // when a failed log append was last logged
	bare               bool             // dead letters carry none of the bytes they are about (see commit)
	logStream          jetstream.Stream // the log's stream, once PurgeLog has asked for it
	// purged is the log record below which PurgeLog dropped the records, and when
	purged   uint64
	purgedAt time.Time

	// resident is res's bytes as counted in stats; resHits and resMisses its reads.
	resident, resHits, resMisses int64
}

// New returns a stage for cfg.Partition, whose state is in db (restored there first
// when it comes from another process). stats may be shared by several stages.
func New(cfg Config, js jetstream.JetStream, db *cold.DB, log *slog.Logger, stats *Stats) (*Stage, error) {
	f, err := resolveFields(cfg.Families)
	if err != nil {
		return nil, err
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 1024
	}
	if cfg.FanoutLimit <= 0 {
		cfg.FanoutLimit = 10_000
	}
	if cfg.Publisher == nil {
		cfg.Publisher = js
	}
	if cfg.MaxPayload <= 0 {
		cfg.MaxPayload = int(js.Conn().MaxPayload())
	}
	pulled, err := unread.LoadPulled(db, cfg.Partition)
	if err != nil {
		return nil, err
	}
	s := &Stage{cfg: cfg, js: js, db: db, log: log.With("stage", "event", "partition", cfg.Partition), stats: stats, fields: f, keys: partitionKeys(cfg.Partitions), pulled: pulled, budget: maxRelease,
		dec:       pipeline.EventDecoder{Families: cfg.Families},
		behind:    flow.NewMeter(js, cfg.Subjects.EventsStream(), cfg.Subjects.EventsStored(cfg.Partition)),
		logBehind: flow.NewMeter(js, cfg.Subjects.LogStream(), cfg.Subjects.Log(cfg.Partition))}
	s.out = hop.NewOutbox(cfg.Publisher, hop.OutboxOptions{Permanent: s.unpublishable, Retries: &stats.Retries, Log: s.log})
	return s, nil
}

// Owned reports whether the partition is certainly still this process's (Config.Valid:
// its lease): while it may be another's, that process's state is the true one.
func (s *Stage) Owned() bool { return s.cfg.Valid == nil || s.cfg.Valid() }

// Pulled is the set of authors whose posts this partition's readers pull, which the
// queries read.
func (s *Stage) Pulled() *unread.Pulled { return s.pulled }

// Lag is how far the partition is behind its stream, in messages (Behind's Msgs).
func (s *Stage) Lag(ctx context.Context) (uint64, error) {
	b, err := s.Behind(ctx)
	return b.Msgs, err
}

// Behind is how far the partition is behind its stream, for health and metrics: the
// sequences between its committed position and the newest event on its subject, or at
// least 1 while an outbox is being published, plus the hop batches it holds above a gap,
// which its position has passed unapplied; and the age of the oldest event not applied.
func (s *Stage) Behind(ctx context.Context) (flow.Behind, error) {
	b, err := s.behind.Behind(ctx, s.pos.Load(), time.Now())
	// busy is read after the position: a batch committed since then is still publishing.
	if s.busy.Load() && b.Msgs == 0 {
		b.Msgs = 1
	}
	b.Msgs += uint64(max(s.holding.Load(), 0))
	return b, err
}

// Run consumes the partition until ctx ends. It first re-publishes whatever the outbox
// still holds from before a crash, then resumes after the committed position.
func (s *Stage) Run(ctx context.Context) error {
	p := s.cfg.Partition
	flow.Label(ctx, "event", "", p, flow.RoleOwner)
	outbox, err := s.load()
	if err != nil {
		return err
	}
	s.countState()
	defer s.uncountState() // what it holds when it stops, not what it held at the start
	// Busy until it is first idle: the outbox left from before and the log's replay are
	// sent and acknowledged first, and a health check meanwhile must not find the
	// partition caught up while they are not stored.
	s.busy.Store(true)
	// What a crash left unacknowledged, under the same message ids; their
	// acknowledgements are not waited for here (the loop settles them, and the
	// partition is busy until they are): a batch lost on its way, found after
	// AckTimeout, held the partition's start as long (TestStartWaitsNoLostPublish).
	// Its receivers order what comes after it: the outbox's window to each subject
	// counts every entry not yet known stored, across restarts (hop.Outbox).
	if err := s.out.Send(ctx, outbox); err != nil {
		return nil // ctx ended
	}
	c := newCoalescer(s.cfg.Partitions)
	var r *flow.Reader // the events after the state's position (replay may open it)
	if s.cfg.Log || s.st.Unsent != 0 {
		r, err = s.replay(ctx, c)
		if err != nil {
			if ctx.Err() != nil {
				return s.finish()
			}
			return fmt.Errorf("event partition %d: %w", p, err)
		}
	}
	if r == nil {
		if r, err = s.readEvents(ctx); err != nil {
			return err
		}
	}
	defer r.Stop()
	s.behind.Track(r, &s.pos)
	defer s.behind.Track(nil, nil)
	batch := make([]jetstream.Msg, 0, s.cfg.MaxBatch)
	if !s.cfg.Log && s.st.Unsent != 0 {
		// A state whose outbox is in the log, and a stage that no longer logs (a
		// process started again where NATS takes smaller payloads): what the log holds
		// is stored before a transaction writes its outbox to Badger again.
		if err := s.out.Reap(ctx, true); err != nil {
			return nil // ctx ended
		}
	}
	for ctx.Err() == nil {
		var m jetstream.Msg
		select {
		case m = <-r.C:
		default:
			// Idle: settle the outbox, but only until a message comes. Waiting for
			// every acknowledgement held the events that came meanwhile — those under
			// load, and for AckTimeout (10 s) every one after a publish lost on its way
			// (TestIdleOutboxWaitsNoEvent).
			settled, err := s.out.ReapUntil(ctx, r.Arrived())
			if err != nil || !settled {
				continue // ctx ended, or a message came: take it, or settle on
			}
			s.busy.Store(false)
			select {
			case <-ctx.Done():
				continue
			case m = <-r.C:
			}
		}
		s.busy.Store(true)
		batch = r.Drain(append(batch[:0], m), s.cfg.MaxBatch)
		err := s.process(ctx, batch, c)
		clear(batch) // the messages, up to MaxBatch of them, are not kept until the next batch
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("event partition %d: %w", p, err)
		}
		s.out.Reap(ctx, false)
	}
	return s.finish()
}

// readEvents reads the partition's events after the state's position.
func (s *Stage) readEvents(ctx context.Context) (*flow.Reader, error) {
	sj := s.cfg.Subjects
	return flow.Read(ctx, s.js, sj.EventsStream(), sj.EventsStored(s.cfg.Partition), s.st.Pos, flow.Buffer{Msgs: 2 * s.cfg.MaxBatch, Bytes: ReadBytes}, s.log)
}

// ReadBytes bounds the payloads an event partition's reader holds for it (flow.Buffer):
// batches of a thousand JSON events are 40–64 KB and a transaction takes a few; with
// 1 MiB on C and 1 MiB pulled, transactions of batches were smaller and cost ~20 % more
// CPU an event.
const ReadBytes = 4 << 20

// load takes the committed state and returns the outbox it left unsent.
func (s *Stage) load() ([]delivery.OutboxEntry, error) {
	p := s.cfg.Partition
	st, outbox, err := stagelog.Load(s.db, p)
	if err != nil {
		return nil, fmt.Errorf("event partition %d: %w", p, err)
	}
	// Follows made by code that kept no follow index are indexed once, before any event.
	if n, err := unread.IndexFollows(s.db, p, 10_000); err != nil {
		return nil, fmt.Errorf("event partition %d: cannot index follows: %w", p, err)
	} else if n > 0 {
		s.log.Info("indexed the follows made before follows had places", "follows", n)
	}
	// The state read afresh: what it knew may be gone.
	s.st = st
	s.forget()
	s.stored, s.inLog = 0, nil
	if len(outbox) > 0 {
		s.stored = outbox[len(outbox)-1].Seq
	}
	s.pos.Store(st.Pos)
	oldest := st.Outbox + 1
	switch {
	case len(outbox) > 0:
		oldest = outbox[0].Seq
	case st.Unsent != 0:
		oldest = st.Unsent
	}
	s.setOutbox(st.Outbox, oldest)
	return outbox, nil
}

// forget drops what the stage keeps in RAM of its state in Badger (read again as
// events need it): views' sketches get a quarter of the RAM, reader states and like
// records the rest.
func (s *Stage) forget() {
	s.res = graph.NewResident[unread.ReaderState](s.cfg.ResidentBytes - s.cfg.ResidentBytes/4)
	s.resHits, s.resMisses = 0, 0
	s.seen = viewers.NewCache(s.cfg.ResidentBytes / 4)
}

// finish waits briefly for outstanding acks and deletes the acknowledged outbox entries
// on a clean stop; anything unacknowledged is re-sent at the next start.
func (s *Stage) finish() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.out.Reap(ctx, true)
	s.published = append(s.published, s.out.Published()...)
	s.published = slices.DeleteFunc(s.published, func(q uint64) bool { return q > s.stored }) // in the log alone
	for len(s.published) > 0 {
		k := min(len(s.published), maxDeletes)
		err := s.db.Update(func(txn *cold.Txn) error {
			return stagelog.DeleteOutbox(txn, s.cfg.Partition, s.published[:k], s.stored)
		})
		if err != nil {
			return err
		}
		s.published = s.published[k:]
	}
	return nil
}

// countState keeps the stats of what the stage holds in step with it: the hop batches
// held above a gap (HopsHeld) and the resident users' state (Resident*).
func (s *Stage) countState() {
	var n int64
	for _, m := range s.st.Hops {
		n += int64(len(m.Held))
	}
	s.stats.HopsHeld.Add(n - s.holding.Swap(n))
	if s.res != nil {
		b := int64(s.res.Bytes())
		s.stats.ResidentBytes.Add(b - s.resident)
		s.stats.ResidentHits.Add(s.res.Hits - s.resHits)
		s.stats.ResidentMisses.Add(s.res.Misses - s.resMisses)
		s.resident, s.resHits, s.resMisses = b, s.res.Hits, s.res.Misses
	}
}

// uncountState takes what the stage holds (hop batches, resident bytes) out of stats as
// it stops: its next owner counts them.
func (s *Stage) uncountState() {
	s.stats.HopsHeld.Add(-s.holding.Swap(0))
	s.stats.ResidentBytes.Add(-s.resident)
	s.resident = 0
}
