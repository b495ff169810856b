package event

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/stages/flow"
	"github.com/tally-dev/tally/store/cold"
)

// Config configures one event-stage partition.
type Config struct {
	Partition  int
	Partitions int
	Subjects   pipeline.Subjects
	Families   pipeline.Families
	// MaxBatch is the most messages committed in one transaction.
	MaxBatch int
	// MaxWrites bounds the relation writes of one transaction, under Badger's limit; a
	// transaction is committed early when the next message could pass it.
	MaxWrites int
	// FanoutLimit is the most followers a post is pushed to; a post of an author with
	// more is pulled by readers instead.
	FanoutLimit int
	// Pulled is the shared set of authors whose posts are pulled.
	Pulled *cold.Pulled
	// Log stores every transaction in the partition's log before it commits, and makes
	// Run replay the records its state lacks first (see LogRecord): on when the state can
	// move to another process.
	Log bool
	// Owner names this ownership of the partition (the node id and the lease revision)
	// in the log's message ids, so that another owner's record is never taken for a
	// re-sent one of ours.
	Owner string
	// Valid, when set, is asked before every log append: false means the partition may
	// have another owner by now, and the stage stops.
	Valid func() bool
}

// Stats counts what a stage did; safe to read from any goroutine.
type Stats struct {
	Messages  atomic.Int64 // messages consumed
	Events    atomic.Int64 // events applied
	Unchanged atomic.Int64 // relation events that changed nothing (a second like, an unlike of nothing)
	Dead      atomic.Int64 // messages dead-lettered
	Forwarded atomic.Int64 // relation events in a batch that belong to another partition
	Deltas    atomic.Int64 // deltas published after coalescing
	Txns      atomic.Int64 // transactions committed
	Retries   atomic.Int64 // outbox publish retries
	Pushed    atomic.Int64 // feed counters a post was pushed to
	Pulled    atomic.Int64 // posts left for readers to pull
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
	keys   []pipeline.ID // an id routing to each partition, for broadcasts

	pos       atomic.Uint64 // last stream sequence committed
	busy      atomic.Bool   // from taking messages until their outbox is acknowledged
	st        cold.StageState
	published []uint64 // outbox entries acknowledged, deleted in the next transaction
	inflight  []inflight
	// failed publishes not yet logged, and when one last was
	retries     int
	retryLogged time.Time
}

// New returns a stage for cfg.Partition. stats may be shared by several stages.
func New(cfg Config, js jetstream.JetStream, db *cold.DB, log *slog.Logger, stats *Stats) (*Stage, error) {
	f, err := resolveFields(cfg.Families)
	if err != nil {
		return nil, err
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 256
	}
	if cfg.MaxWrites <= 0 {
		cfg.MaxWrites = 20_000
	}
	if cfg.FanoutLimit <= 0 {
		cfg.FanoutLimit = 10_000
	}
	return &Stage{cfg: cfg, js: js, db: db, log: log.With("stage", "event", "partition", cfg.Partition), stats: stats, fields: f, keys: partitionKeys(cfg.Partitions)}, nil
}

// Lag is how far the partition is behind its stream: the sequences between its committed
// position and the newest event on its subject, or at least 1 while an outbox is being
// published.
func (s *Stage) Lag(ctx context.Context) (uint64, error) {
	lag, err := flow.Lag(ctx, s.js, s.cfg.Subjects.EventsStream(), s.cfg.Subjects.EventsStored(s.cfg.Partition), s.pos.Load())
	// busy is read after the position: a batch committed since then is still publishing.
	if s.busy.Load() && lag == 0 {
		lag = 1
	}
	return lag, err
}

// Run consumes the partition until ctx ends. It first re-publishes whatever the outbox
// still holds from before a crash, then resumes after the committed position.
func (s *Stage) Run(ctx context.Context) error {
	p := s.cfg.Partition
	st, outbox, err := cold.LoadStage(s.db, p)
	if err != nil {
		return fmt.Errorf("event partition %d: %w", p, err)
	}
	s.st = st
	s.pos.Store(st.Pos)
	s.send(outbox) // what a crash left unacknowledged, under the same message ids
	if err := s.reap(ctx, true); err != nil {
		return err
	}
	r, err := flow.Read(ctx, s.js, s.cfg.Subjects.EventsStream(), s.cfg.Subjects.EventsStored(p), s.st.Pos, 2*s.cfg.MaxBatch)
	if err != nil {
		return err
	}
	defer r.Stop()
	batch := make([]jetstream.Msg, 0, s.cfg.MaxBatch)
	c := newCoalescer(s.cfg.Partitions)
	if s.cfg.Log {
		if err := s.replay(ctx, r, c); err != nil && ctx.Err() == nil {
			return fmt.Errorf("event partition %d: %w", p, err)
		}
	}
	for ctx.Err() == nil {
		var m jetstream.Msg
		select {
		case m = <-r.C:
		default: // idle: settle the outbox before waiting
			if err := s.reap(ctx, true); err != nil {
				continue // ctx ended
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
		if err == nil {
			err = s.reap(ctx, len(s.inflight) > maxInflight)
		}
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("event partition %d: %w", p, err)
		}
	}
	return s.finish()
}

// finish waits briefly for outstanding acks and deletes the acknowledged outbox entries
// on a clean stop; anything unacknowledged is re-sent at the next start.
func (s *Stage) finish() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.reap(ctx, true)
	if len(s.published) == 0 {
		return nil
	}
	err := s.db.Badger().Update(func(txn *badger.Txn) error {
		return cold.DeleteOutbox(txn, s.cfg.Partition, s.published)
	})
	s.published = nil
	return err
}

// process commits msgs in as few transactions as MaxWrites allows, then publishes.
func (s *Stage) process(ctx context.Context, msgs []jetstream.Msg, c *coalescer) error {
	for len(msgs) > 0 {
		n, err := s.commit(ctx, msgs, c)
		if err != nil {
			return err
		}
		msgs = msgs[n:]
	}
	return nil
}

// commit applies a prefix of msgs in one transaction and returns its length; the outbox
// it wrote is sent once the transaction has committed. With a log, the transaction is
// logged first, and only a stored record lets it commit.
func (s *Stage) commit(ctx context.Context, msgs []jetstream.Msg, c *coalescer) (int, error) {
	p := s.cfg.Partition
	txn := s.db.Badger().NewTransaction(true)
	defer txn.Discard()
	c.reset()
	n, pos, outbox, err := s.applyMsgs(txn, msgs, c, s.cfg.MaxWrites)
	if err != nil {
		return 0, err
	}
	st := s.st // st.Seqs is replaced below, never written in place
	st.Pos = pos
	st.Seqs = make(map[string]uint64, len(s.st.Seqs)+len(c.order))
	for k, v := range s.st.Seqs {
		st.Seqs[k] = v
	}
	for _, d := range c.order {
		dd := c.byDest[d]
		key := d.String()
		st.Seqs[key]++
		b := pipeline.DeltaBatch{Source: uint32(p), Seq: st.Seqs[key], Deltas: dd.deltas}
		outbox = append(outbox, cold.OutboxEntry{
			Subject: s.cfg.Subjects.Delta(d.family, d.partition),
			MsgID:   fmt.Sprintf("d.%d.%s.%d", p, key, b.Seq),
			Data:    pipeline.AppendDeltaBatch(nil, &b),
		})
		s.stats.Deltas.Add(int64(len(dd.deltas)))
	}
	for i := range outbox {
		st.Outbox++
		outbox[i].Seq = st.Outbox
	}
	if s.cfg.Log {
		seq, err := s.appendLog(ctx, &cold.LogRecord{Prev: s.st.Pos, State: st, Outbox: outbox})
		if err != nil {
			return 0, err
		}
		st.Log = seq
	}
	return n, s.save(txn, st, outbox)
}

// applyMsgs applies a prefix of msgs in txn — as many as maxWrites allows (all when it is
// 0) — and returns its length, the position of its last message and the outbox entries
// it made other than deltas, which c collects.
func (s *Stage) applyMsgs(txn *badger.Txn, msgs []jetstream.Msg, c *coalescer, maxWrites int) (n int, pos uint64, outbox []cold.OutboxEntry, err error) {
	p := s.cfg.Partition
	writes := 0
	for _, m := range msgs {
		md, err := m.Metadata()
		if err != nil {
			return 0, 0, nil, fmt.Errorf("message without metadata: %w", err)
		}
		seq, ts := md.Sequence.Stream, md.Timestamp
		evs, bad, derr := s.decode(m)
		if n > 0 && maxWrites > 0 && writes+3*len(evs) > maxWrites {
			break
		}
		n++
		pos = seq
		s.stats.Messages.Add(1)
		if derr != nil {
			outbox = append(outbox, s.deadLetter(m, seq, -1, m.Data(), derr))
			continue
		}
		for _, b := range bad {
			data, _ := pipeline.Marshal(&b.Event, true)
			outbox = append(outbox, s.deadLetter(m, seq, b.Index, data, b.Err))
		}
		for i := range evs {
			e := &evs[i]
			if e.TS == 0 {
				e.TS = ts.UnixMilli()
			}
			if e.Type == pipeline.TypeSystem && !e.Local {
				copies, err := s.broadcast(e, seq, i)
				if err != nil {
					return 0, 0, nil, err
				}
				outbox = append(outbox, copies...)
			}
			if e.Relational() && pipeline.PartitionOf(e.Key(), s.cfg.Partitions) != p {
				fwd, err := s.forward(e, seq, i)
				if err != nil {
					return 0, 0, nil, err
				}
				outbox = append(outbox, fwd)
				continue
			}
			if err := s.apply(txn, e, c); err != nil {
				return 0, 0, nil, fmt.Errorf("cannot apply %s event at %d: %w", e.Type, seq, err)
			}
			if n := s.stats.ByType[e.Type]; n != nil {
				n.Add(1)
			}
			writes += 3
		}
		s.stats.Events.Add(int64(len(evs)))
	}
	return n, pos, outbox, nil
}

// save writes the outbox and the state in txn, commits it and sends the outbox.
func (s *Stage) save(txn *badger.Txn, st cold.StageState, outbox []cold.OutboxEntry) error {
	p := s.cfg.Partition
	if len(s.published) > 0 {
		if err := cold.DeleteOutbox(txn, p, s.published); err != nil {
			return err
		}
	}
	for i := range outbox {
		if err := cold.PutOutbox(txn, p, &outbox[i]); err != nil {
			return err
		}
	}
	if err := cold.PutStage(txn, p, &st); err != nil {
		return err
	}
	if err := txn.Commit(); err != nil {
		return fmt.Errorf("cannot commit: %w", err)
	}
	s.st, s.published = st, nil
	s.stats.Txns.Add(1)
	s.pos.Store(st.Pos)
	s.send(outbox)
	return nil
}

// decode returns a message's events, or the reason it must be dead-lettered.
func (s *Stage) decode(m jetstream.Msg) ([]pipeline.Event, []pipeline.BadEvent, error) {
	typ, err := s.parseSubject(m.Subject())
	if err != nil {
		return nil, nil, err
	}
	if m.Headers().Get(jetstream.MsgIDHeader) == "" && typ == pipeline.TypeBatch {
		return nil, nil, fmt.Errorf("%w: a batch needs a Nats-Msg-Id header", pipeline.ErrBadEvent)
	}
	evs, bad, err := pipeline.DecodeEvents(typ, m.Data(), m.Headers(), s.cfg.Families)
	if err != nil {
		return nil, nil, err
	}
	if m.Headers().Get(jetstream.MsgIDHeader) == "" && typ != pipeline.TypeBatch && evs[0].Tx == "" {
		return nil, nil, fmt.Errorf("%w: no transaction id: set the Nats-Msg-Id header (or tx in the event)", pipeline.ErrBadEvent)
	}
	return evs, bad, nil
}

// parseSubject returns the type token of <prefix>.ep.<p>.<type>.<key>.
func (s *Stage) parseSubject(subj string) (string, error) {
	rest, ok := strings.CutPrefix(subj, s.cfg.Subjects.Prefix+".ep.")
	parts := strings.Split(rest, ".")
	if !ok || len(parts) != 3 {
		return "", fmt.Errorf("%w: unexpected subject %q", pipeline.ErrBadEvent, subj)
	}
	return parts[1], nil
}

// forward re-publishes a relation event of a batch to the subject of its own partition,
// through the outbox so it is neither lost nor repeated.
func (s *Stage) forward(e *pipeline.Event, seq uint64, i int) (cold.OutboxEntry, error) {
	data, err := pipeline.Marshal(e, false)
	if err != nil {
		return cold.OutboxEntry{}, err
	}
	s.stats.Forwarded.Add(1)
	return cold.OutboxEntry{
		Subject: s.cfg.Subjects.Event(e.Type, e.Key()),
		MsgID:   fmt.Sprintf("fwd.%d.%d.%d", s.cfg.Partition, seq, i),
		Data:    data,
	}, nil
}

// DeadLetter is the JSON payload of a dead-letter entry: a whole message (Index -1) or
// one event of a batch (Data is then that event as JSON).
type DeadLetter struct {
	Error   string      `json:"error"`
	Subject string      `json:"subject"`
	Seq     uint64      `json:"seq"`
	Index   int         `json:"index"`
	Header  nats.Header `json:"header,omitempty"`
	Data    []byte      `json:"data"`
}

func (s *Stage) deadLetter(m jetstream.Msg, seq uint64, index int, data []byte, reason error) cold.OutboxEntry {
	s.stats.Dead.Add(1)
	payload, _ := json.Marshal(DeadLetter{Error: reason.Error(), Subject: m.Subject(), Seq: seq, Index: index, Header: m.Headers(), Data: data})
	return cold.OutboxEntry{
		Subject: s.cfg.Subjects.DLQ("event", s.cfg.Partition),
		MsgID:   fmt.Sprintf("dlq.%d.%d.%d", s.cfg.Partition, seq, index),
		Data:    payload,
	}
}
