package event

import (
	"context"
	"fmt"
	"time"

	"github.com/klauspost/compress/s2"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/stages/flow"
	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/stagelog"
	"github.com/tally-dev/tally/store/unread"
)

// Mirror keeps the stage's state a warm copy of its partition's owner's, as a standby
// (Kafka Streams' standby tasks): each record the owner appends to the partition's log
// is applied here as it comes — its writes (stagelog.Record.Writes), which are the
// owner's transaction key for key, or, for a record that carries none, the events it
// covers, executed again — with the record's state and outbox, deleting the outbox
// entries the owner deleted; but nothing is sent and nothing appended. A takeover by
// this process then replays only the records after the last one applied here (Run), and
// re-sends the outbox the owner may not have sent: every receiver recognises what it
// has had already. The events stream is read only while records carry no writes.
//
// Mirror returns nil when ctx ends, and an error wrapping ErrGap when the log or the
// events stream no longer reaches back to its state (purged past it): a standby that
// fell behind the owner's backups starts again from the newest one.
func (s *Stage) Mirror(ctx context.Context) error {
	p := s.cfg.Partition
	flow.Label(ctx, "event", "", p, flow.RoleStandby)
	if _, err := s.load(); err != nil {
		return err
	}
	defer s.uncountState()
	s.logged.Store(s.st.Log)
	sj := s.cfg.Subjects
	lr, err := flow.Read(ctx, s.js, sj.LogStream(), sj.Log(p), s.st.Log, flow.Buffer{Msgs: 16, Bytes: ReadBytes}, s.log)
	if err != nil {
		return err
	}
	defer lr.Stop()
	var a logApplier
	defer a.stop()
	c := newCoalescer(s.cfg.Partitions)
	first := true
	for {
		var m jetstream.Msg
		select {
		case m = <-lr.C:
		case <-ctx.Done():
			return nil
		}
		rec, seq, err := decodeLog(m)
		applied, fromWrites := false, false
		if err == nil {
			applied, fromWrites, err = s.applyLogged(ctx, &a, rec, seq, c, first, false)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("standby of event partition %d: %w", p, err)
		}
		switch {
		case applied && fromWrites:
			s.stats.MirroredWrites.Add(1)
		case applied:
			s.stats.MirroredEvents.Add(1)
		}
		first = first && !applied
		s.logged.Store(s.st.Log)
	}
}

// logApplier is what applying a partition's log records in order keeps between them
// (Stage.applyLogged): the events reader of records without writes, and whether writes
// were applied since the stage last read its users' state into RAM.
type logApplier struct {
	r      *flow.Reader
	forgot bool
}

// stop stops the events reader, if one is open.
func (a *logApplier) stop() {
	if a.r != nil {
		a.r.Stop()
		a.r = nil
	}
}

// applyLogged applies rec, log record seq — for a standby (Mirror) or a new owner's
// replay, which sends its outbox again (send) — from the writes it carries
// (applyWrites), or, when it carries none, by executing its events (logRecord), read
// from an events reader opened only then at the state's position, after reading again
// what the stage keeps in RAM when writes were applied since (refresh). A record with
// writes takes the state past what that reader holds: it is stopped. applied is false
// for the state's own record; fromWrites says which way rec went.
func (s *Stage) applyLogged(ctx context.Context, a *logApplier, rec *stagelog.Record, seq uint64, c *coalescer, first, send bool) (applied, fromWrites bool, err error) {
	if rec.Writes == nil {
		if a.r == nil {
			if a.r, err = s.readEvents(ctx); err != nil {
				return false, false, err
			}
		}
		if a.forgot {
			if err := s.refresh(); err != nil {
				return false, false, err
			}
			a.forgot = false
		}
		applied, err = s.logRecord(ctx, rec, seq, a.r, c, first, send)
		return applied, false, err
	}
	a.stop()
	if own, err := s.ownRecord(rec, seq, first); own || err != nil {
		return false, true, err
	}
	if err := s.applyWrites(rec, seq); err != nil {
		return false, true, err
	}
	a.forgot = true
	if send {
		s.sentFrom(seq, rec.Outbox)
		err = s.out.Send(ctx, rec.Outbox)
	}
	return true, true, err
}

// applyWrites applies rec, log record seq, from the writes it carries — its owner's
// transaction, key for key — in one transaction with the state naming it, deleting
// the outbox entries this stage has seen stored (none on a standby, which sends
// nothing). What the stage keeps in RAM of its users is not read again: refresh.
func (s *Stage) applyWrites(rec *stagelog.Record, seq uint64) error {
	writes, err := s2.Decode(s.writes[:cap(s.writes)], rec.Writes)
	if err != nil {
		return fmt.Errorf("%w: log record %d: writes: %w", cold.ErrCorrupt, seq, err)
	}
	defer func() { s.writes = kept(writes) }()
	txn := s.db.NewTxn(true)
	defer txn.Discard()
	if err := txn.ApplyWrites(writes); err != nil {
		return fmt.Errorf("log record %d: %w", seq, err)
	}
	s.published = append(s.published, s.out.Published()...)
	deleted := min(len(s.published), maxDeletes)
	if err := stagelog.DeleteOutbox(txn, s.cfg.Partition, s.published[:deleted], s.stored); err != nil {
		return err
	}
	st := rec.State
	st.Log = seq
	if err := stagelog.Put(txn, s.cfg.Partition, &st); err != nil {
		return err
	}
	if err := txn.Commit(); err != nil {
		return fmt.Errorf("cannot commit: %w", err)
	}
	s.published = s.published[deleted:]
	if st.Unsent == 0 && len(rec.Outbox) > 0 { // the outbox went to Badger (see write)
		s.stored = max(s.stored, rec.Outbox[len(rec.Outbox)-1].Seq)
	}
	s.noteCommitted(&st)
	s.st = st
	s.pos.Store(st.Pos)
	s.countState()
	s.stats.Txns.Add(1)
	return nil
}

// refresh reads again what the stage keeps in RAM of its state in Badger, once writes
// applied from the log (applyWrites) may have changed it: the users' state it keeps
// (forget), and the authors whose posts its readers pull.
func (s *Stage) refresh() error {
	pulled, err := unread.LoadPulled(s.db, s.cfg.Partition)
	if err != nil {
		return err
	}
	s.pulled = pulled
	s.forget()
	return nil
}

// LogBehind is how far a mirroring stage (Mirror) is behind its owner's log: the age
// of the oldest record the owner appended that it has not applied tells whether a
// standby is caught up, whatever the rate of the log.
func (s *Stage) LogBehind(ctx context.Context) (flow.Behind, error) {
	return s.logBehind.Behind(ctx, s.logged.Load(), time.Now())
}

// Position is the last events-stream sequence the stage's state reflects.
func (s *Stage) Position() uint64 { return s.pos.Load() }
