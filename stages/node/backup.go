package node

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/stages/event"
	"github.com/tally-dev/tally/stages/query"
	"github.com/tally-dev/tally/store/cold"
)

// The event stages' state backup in the object store (each counter partition's is
// counterObject(p)).
const eventsObject = "events"

// takeEvents takes the event stages' lease (ErrOwned when another process holds it),
// brings their state here unless this process was their last owner — the last backup,
// which the stages then bring up to their last transaction by replaying their logs (see
// event.Config.Log) — and starts them and the queries that read relations.
func (n *Node) takeEvents(ctx context.Context) error {
	l, err := n.owners.take(ctx, eventsKey)
	if err != nil {
		return err
	}
	return n.startEvents(ctx, l)
}

// startEvents starts the event stages under the lease l.
func (n *Node) startEvents(ctx context.Context, l *lease) (err error) {
	from := "local"
	if n.obs != nil {
		if from, err = n.claim(ctx, n.eventsPiece(), l); err != nil {
			l.release(ctx)
			return fmt.Errorf("event stages: %w", err)
		}
	}
	if n.pulled, err = cold.LoadPulled(n.db); err != nil {
		return err
	}
	stages := make([]*event.Stage, n.cfg.Partitions)
	laggers := map[string]query.Lagger{}
	if n.cfg.PublishFaults != "" {
		n.log.Warn("internal publishes fail, are delayed and reordered on purpose (a test setting)", "faults", n.cfg.PublishFaults)
	}
	for p := range stages {
		ec := event.Config{Partition: p, Partitions: n.cfg.Partitions, Subjects: n.subjects, Families: n.cfg.Families, FanoutLimit: n.cfg.FanoutLimit, Pulled: n.pulled}
		ec.Publisher = n.cfg.faultyPublisher(n.js, uint64(1<<20+p))
		if n.obs != nil { // the state moves between processes: log every transaction
			ec.Log, ec.Owner, ec.Valid = true, l.token(), l.valid
		}
		if stages[p], err = event.New(ec, n.js, n.db, n.log, n.EventStats); err != nil {
			l.release(ctx)
			return err
		}
		laggers["event."+strconv.Itoa(p)] = stages[p]
	}
	for _, st := range stages {
		n.goRun(n.runCtx, st.Run)
	}
	n.takeover.Store(from)
	n.events.Store(l)
	n.goRun(n.runCtx, func(ctx context.Context) error {
		if err := l.keep(ctx, n.log); err != nil {
			// Another process may own the event stages now: stop everything.
			return fmt.Errorf("%w: %w", ErrOwned, err)
		}
		return nil
	})
	if err := n.query.SetEvents(laggers, n.pulled); err != nil {
		return err
	}
	n.log.Info("owning the event stages", "state", from)
	return nil
}

// backups stores a backup of the event stages' state (when owned here) and of each
// counter partition owned here every BackupEvery.
func (n *Node) backups(ctx context.Context) error {
	return every(ctx, n.cfg.BackupEvery, func() error {
		start := time.Now()
		var bytes uint64
		failed := func(what string, err error) {
			if err != nil && ctx.Err() == nil {
				n.BackupErrs.Add(1)
				n.log.Warn("cannot back the state up to NATS; deltas and log records are kept until a backup succeeds", "what", what, "err", err)
			}
		}
		if l := n.events.Load(); l != nil {
			size, err := n.backupEvents(ctx, l)
			bytes += size
			failed(eventsObject, err)
		}
		for _, pt := range n.heldParts() {
			failed(counterObject(pt.p), n.backupPart(ctx, pt))
		}
		level := slog.LevelDebug
		if n.Backups.Add(1) == 1 {
			level = slog.LevelInfo
		}
		n.log.Log(ctx, level, "state backed up to NATS", "events bytes", bytes, "took", time.Since(start))
		return nil
	})
}

// backupEvents stores the event stages' state, then purges the log records it covers.
func (n *Node) backupEvents(ctx context.Context, l *lease) (uint64, error) {
	size, logs, err := n.store(ctx, n.eventsPiece(), l)
	if err != nil {
		return 0, err
	}
	if err := n.purgeLogs(ctx, logs); err != nil {
		n.log.Warn("cannot purge the event-stage logs a backup covers", "err", err)
	}
	return size, nil
}

// purgeLogs drops each event-stage log's records below the last one a stored backup
// covers: a new owner replays only the records after it. The covered record itself stays,
// the subject's last sequence that the next append expects.
func (n *Node) purgeLogs(ctx context.Context, logs []uint64) error {
	st, err := n.js.Stream(ctx, n.subjects.LogStream())
	if err != nil {
		return err
	}
	for p, seq := range logs {
		if seq <= 1 {
			continue
		}
		if err := st.Purge(ctx, jetstream.WithPurgeSubject(n.subjects.Log(p)), jetstream.WithPurgeSequence(seq)); err != nil {
			return err
		}
	}
	return nil
}

// Takeover tells how this process's event stages started when another process had
// owned them: from its "backup" restored from NATS, or "empty" (no backup; the logs and
// streams replayed), or "" when it did not take them over (or does not own them).
func (n *Node) Takeover() string {
	if from, _ := n.takeover.Load().(string); from != "local" {
		return from
	}
	return ""
}

// Events reports whether this process owns the event stages.
func (n *Node) Events() bool { return n.events.Load() != nil }
