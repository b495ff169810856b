package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/tally-dev/tally/stages/cluster"
	"github.com/tally-dev/tally/stages/event"
	"github.com/tally-dev/tally/stages/flow"
	"github.com/tally-dev/tally/store/checkpoint"
	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/stagelog"
)

// Each partition's state is backed up as two pieces under its one lease: its counters
// (counterObject) and its event stage (eventObject), whose log a new owner replays from
// the backup on (see event.Config.Log).

// legacyEvents is the pointer of that one backup.
const legacyEvents = "events"

func eventObject(p int) string { return "events." + strconv.Itoa(p) }

func (n *Node) eventPiece(p int) cluster.Piece {
	return cluster.Piece{Name: eventObject(p), Keys: cold.EventKeys(p), Pos: func() ([]uint64, error) {
		st, _, err := stagelog.Load(n.db, p)
		if err != nil {
			return nil, err
		}
		// The log record the state names, then the oldest one loading it reads (its
		// outbox's, when that is kept in the log): what a purge must keep. Both only grow.
		return []uint64{st.Log, st.LogKept()}, nil
	}}
}

// claimEvents brings partition p's event state here under l (see claim). The first
// claim after an upgrade finds no pointer of its own: the state is then in the local
// database of the process that owned every stage, which alone may take it.
func (n *Node) claimEvents(ctx context.Context, p int, l *cluster.Lease, warm bool) (string, error) {
	cur, err := n.backups.LastOwner(ctx, eventObject(p))
	if err != nil {
		return "", err
	}
	if cur == "" {
		old, err := n.backups.LastOwner(ctx, legacyEvents)
		if err != nil {
			return "", err
		}
		if old != "" && old != l.ID() {
			return "", fmt.Errorf("%w: partition %d: start the tallyd with node id %s (its data directory) alone first, then the others with --join", ErrLegacyState, p, old)
		}
	}
	pc := n.eventPiece(p)
	pc.Warm = warm
	return n.backups.Claim(ctx, pc, l)
}

func (n *Node) counterPiece(p int) cluster.Piece {
	return cluster.Piece{Name: counterObject(p), Keys: cold.CounterKeys(n.families(), p), Replacing: func() { n.dropSnapshots(p) }, Pos: func() ([]uint64, error) {
		pos := make([]uint64, len(n.cfg.Families))
		for i, f := range n.cfg.Families {
			cp, err := checkpoint.LoadCheckpoint(n.db, f.Name, p)
			if err != nil {
				return nil, err
			}
			pos[i] = cp.Pos
		}
		return pos, nil
	}}
}

// minLogPayload is the least payload NATS must take for a process that owns every
// partition to keep its stages' outboxes in their logs: a record carries the
// transaction's state (its destinations' sequences) beside its outbox, and one too
// small for a lone message's transaction could be neither committed nor dead-lettered.
// NATS's default is 1 MiB.
const minLogPayload = 64 << 10

// eventConfig is what partition p's event stage is, owned or standby.
func (n *Node) eventConfig(p int) event.Config {
	return event.Config{Partition: p, Partitions: n.cfg.Partitions, Subjects: n.subjects, Families: n.cfg.Families, FanoutLimit: n.cfg.FanoutLimit, ResidentBytes: n.residentBytes(), Windows: n.cfg.Windows}
}

// startStage starts partition p's event stage in pt, under pt's lease.
func (n *Node) startStage(ctx context.Context, pt *owned) error {
	p := pt.p
	ec := n.eventConfig(p)
	ec.Publisher = n.cfg.publisher(n.js, uint64(1<<20+p))
	// Every transaction is logged: the log keeps the outbox (stagelog.State.Unsent), and
	// when the state moves between processes a new owner replays it. A process that owns
	// every partition keeps the outbox in Badger instead where NATS takes no record of
	// a useful size (minLogPayload).
	ec.Log = n.backups != nil || n.js.Conn().MaxPayload() >= minLogPayload
	if n.backups != nil {
		ec.Owner, ec.Valid = pt.lease.Token(), pt.lease.Valid
		// The partition's standby in another process applies the records' writes
		// rather than executing their events again; without standbys nothing reads
		// them (tallyd of one cluster run with the same --standbys).
		ec.LogWrites = n.cfg.Standbys
	} else {
		ec.PurgeLog = true // no backup purges it
	}
	st, err := event.New(ec, n.stageJS(p), n.db, n.log, n.EventStats)
	if err != nil {
		return err
	}
	pt.stage = st
	pt.stageWG.Go(func() {
		err := st.Run(ctx)
		switch {
		case err == nil || ctx.Err() != nil:
		case errors.Is(err, event.ErrFenced):
			// Another process owns the partition by now: this one lets it go.
			n.log.Error("event partition fenced by another owner; stopping the partition", "partition", p, "err", err)
			n.wg.Go(func() { n.stopPart(pt, leaveLost) })
		default:
			n.fail(err)
		}
	})
	return nil
}

// backupRest paces the backups: a round of them that took t waits at least
// backupRest×t before the next, whatever BackupEvery says. A standby primes from a
// backup in a few times what storing it took (restoring an id costs about 2.4 times
// backing it up), and must reach the next backup's positions before the one after is
// stored (see standby); rounds back to back, which a short BackupEvery or a large
// partition made, left it no time, so it started again from the newest backup for ever.
// Backups then take at most a quarter of the time.
const backupRest = 3

// backupLoop stores a backup of each partition owned here every BackupEvery, paced by
// backupRest.
func (n *Node) backupLoop(ctx context.Context) error {
	rest := n.cfg.BackupRest
	switch {
	case rest == 0:
		rest = backupRest
	case rest < 0:
		rest = 0
	}
	return cluster.Paced(ctx, n.cfg.BackupEvery, rest, func() error {
		start := time.Now()
		var bytes uint64
		for _, pt := range n.heldParts() {
			// A partition that stops here ends its backup: its hand-over waits for no
			// backup but its own (a round waits for the hand-over, and a backup may
			// take minutes on a loaded cluster).
			pctx, cancel := context.WithCancel(ctx)
			unhook := context.AfterFunc(pt.ctx, cancel)
			size, err := n.backupPart(pctx, pt)
			unhook()
			cancel()
			bytes += size
			if err != nil && ctx.Err() == nil && pt.ctx.Err() == nil {
				n.BackupErrs.Add(1)
				n.log.Warn("cannot back the state up to NATS; deltas and log records are kept until a backup succeeds", "partition", pt.p, "err", err)
			}
		}
		level := slog.LevelDebug
		if n.Backups.Add(1) == 1 {
			level = slog.LevelInfo
		}
		n.log.Log(ctx, level, "state backed up to NATS", "bytes", bytes, "took", time.Since(start))
		return nil
	})
}

// backupPart stores partition p's state in the object store while its lease is held:
// its counters, then lets its workers purge the deltas the previous backup covers; its
// event stage, then purges the log records the previous backup covers. The previous
// one's, not this one's: a standby reaches a backup's positions a moment after it is
// stored, and sees it while it is current; so nothing is purged that a standby
// following the owner has not applied (see standby.go).
func (n *Node) backupPart(ctx context.Context, pt *owned) (uint64, error) {
	pt.backup.Lock()
	defer pt.backup.Unlock()
	if n.backing != nil {
		n.backing(ctx, pt.p)
	}
	size, limits, err := n.backups.Store(ctx, n.counterPiece(pt.p), pt.lease)
	if err != nil {
		return 0, err
	}
	if limits != nil { // else nothing was stored: the current backup is as it was
		for i, w := range pt.workers {
			if i < len(pt.kept.deltas) {
				w.SetPurgeLimit(pt.kept.deltas[i])
			}
		}
		pt.kept.deltas = limits
	}
	esize, logs, err := n.backups.Store(ctx, n.eventPiece(pt.p), pt.lease)
	if err != nil {
		return size, err
	}
	if logs != nil {
		if err := n.purgeLog(ctx, pt.p, pt.kept.log); err != nil {
			n.log.Warn("cannot purge the event-stage log records a backup covers", "partition", pt.p, "err", err)
		}
		pt.kept.log = logs[len(logs)-1]
	}
	return size + esize, nil
}

// purgeLog drops partition p's log records below seq, the oldest one a stored backup's
// state reads (stagelog.State.LogKept): a new owner replays only the records after the
// state's own, and reads the outbox entries that may be unsent from the record holding
// the oldest. The record itself stays, which may be the subject's last sequence that the
// next append expects.
func (n *Node) purgeLog(ctx context.Context, p int, seq uint64) error {
	st, err := n.js.Stream(ctx, n.subjects.LogStream())
	if err != nil {
		return err
	}
	return flow.PurgeBelow(ctx, st, n.subjects.Log(p), seq)
}

// Takeover tells how this process's last event stage taken from another process
// started: from its "backup" restored from NATS, or "empty" (no backup; the log and
// stream replayed), or "" when it took none over.
func (n *Node) Takeover() string {
	if from, _ := n.takeover.Load().(string); from != "local" {
		return from
	}
	return ""
}

// Events reports whether this process owns the event stage of some partition.
func (n *Node) Events() bool {
	for _, pt := range n.heldParts() {
		if pt.stage != nil {
			return true
		}
	}
	return false
}
