package event

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/backoff"
	"github.com/tally-dev/tally/stages/flow"
	"github.com/tally-dev/tally/store/stagelog"
)

// appendLog stores the record of a transaction before it commits and returns its
// sequence in the log stream. The append expects the stage's last record to be the
// subject's last message, so an owner that lost the partition — paused past its lease
// while another took over — is fenced at its next transaction, before it commits
// anything or publishes a delta. A failed append is retried under the same message id
// (a duplicate answers with the first one's sequence), so a lost acknowledgement neither
// stores a record twice nor is taken for fencing.
func (s *Stage) appendLog(ctx context.Context, data []byte, pos, n uint64) (uint64, error) {
	p := s.cfg.Partition
	msg := &nats.Msg{Subject: s.cfg.Subjects.Log(p), Data: data,
		Header: nats.Header{jetstream.MsgIDHeader: []string{pipeline.LogMsgID(p, pos, n, s.cfg.Owner)}}}
	wait := backoff.New(50*time.Millisecond, 2*time.Second)
	expect := s.st.Log
	for {
		if s.cfg.Valid != nil && !s.cfg.Valid() {
			return 0, fmt.Errorf("%w: the ownership lease is not certainly held", ErrFenced)
		}
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		ack, err := s.js.PublishMsg(pctx, msg, jetstream.WithExpectLastSequencePerSubject(expect))
		cancel()
		switch {
		case err == nil:
			return ack.Sequence, nil
		case flow.Fenced(err):
			// Another owner's records come after ours — or this very record, appended by
			// a try whose acknowledgement was lost: NATS checks the last sequence before
			// the message id. A log whose last record is older than ours lost ours (aged
			// out under an older stream configuration, purged by hand): no owner wrote
			// since, and the partition goes on after what it holds.
			lm, lerr := flow.Last(ctx, s.js, s.cfg.Subjects.LogStream(), msg.Subject)
			var last uint64
			if lm != nil {
				last = lm.Sequence
				if last > expect && lm.Header.Get(jetstream.MsgIDHeader) == msg.Header.Get(jetstream.MsgIDHeader) {
					return last, nil
				}
			}
			if lerr == nil && last >= expect {
				return 0, fmt.Errorf("%w (expected record %d last): %w", ErrFenced, expect, err)
			}
			if lerr == nil {
				s.log.Warn("the partition's last log record is gone; appending after what the log holds", "partition", p, "record", expect, "log last", last)
				expect = last
				continue
			}
			err = lerr
		case ctx.Err() != nil:
			return 0, ctx.Err()
		}
		if err := s.retry(ctx, wait, "log append failed, will retry", err); err != nil {
			return 0, err
		}
	}
}

// purgeLog drops the log records below the one the committed state needs
// (stagelog.State.LogKept) once at least purgeRecords of them, or any for purgeEvery,
// have piled up. A failed purge is only logged: the next one drops them.
func (s *Stage) purgeLog(ctx context.Context) {
	keep := s.st.LogKept()
	if keep <= s.purged+1 || keep < s.purged+purgeRecords && time.Since(s.purgedAt) < purgeEvery {
		return
	}
	s.purgedAt = time.Now()
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var err error
	if s.logStream == nil { // asked once: a purge is one request then
		s.logStream, err = s.js.Stream(pctx, s.cfg.Subjects.LogStream())
	}
	if err == nil {
		err = flow.PurgeBelow(pctx, s.logStream, s.cfg.Subjects.Log(s.cfg.Partition), keep)
	}
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("cannot purge the log records the state no longer needs; will retry", "partition", s.cfg.Partition, "below", keep, "err", err)
		}
		return
	}
	s.purged = keep
}

// A stage's log with PurgeLog is purged once purgeRecords records or more can go, or
// any after purgeEvery: a record holds a transaction's outbox (~50–100 bytes an event
// of JSON batches), and a purge is a request to the server.
const (
	purgeRecords = 64
	purgeEvery   = 5 * time.Second
)

// replay brings the state up to the partition's last log record: each record after the
// state's is applied in one transaction, with the record's state and outbox rather than
// what this process would have cut and numbered, and its outbox is sent again under the
// same message ids. A record that carries its transaction's writes (Config.LogWrites) is
// applied from them, as a standby applies it (applyWrites); one that does not, to the
// same events, executed again (read from an events reader opened only then). This is
// how a new owner (restored from a backup, or starting empty) or a restart after a
// crash between a record and its commit continues exactly where the partition's last
// transaction left it, whatever the previous owner had published. The outbox entries
// the state's own transactions wrote that may not be stored yet (State.Unsent) are read
// from the log on the way, from the record holding the oldest, and sent first.
//
// It returns the events reader it left open after the state's position, if any; on an
// error, none.
func (s *Stage) replay(ctx context.Context, c *coalescer) (*flow.Reader, error) {
	var a logApplier
	if err := s.replayLog(ctx, &a, c); err != nil {
		a.stop()
		return nil, err
	}
	return a.r, nil
}

// replayLog is replay's work, its events reader kept in a.
func (s *Stage) replayLog(ctx context.Context, a *logApplier, c *coalescer) error {
	sj := s.cfg.Subjects
	subj := sj.Log(s.cfg.Partition)
	var last uint64
	err := s.retrying(ctx, "read the log", func() (err error) {
		last, err = flow.LastSeq(ctx, s.js, sj.LogStream(), subj)
		return err
	})
	if err != nil {
		return err
	}
	from, loaded := s.st.Log, s.st // loaded: the state as committed, whose entries are sought
	unsent := loaded.Unsent != 0 && loaded.Unsent <= loaded.Outbox
	if unsent {
		from = min(from, max(loaded.UnsentLog, 1)-1) // Read starts after from
	}
	if last <= from {
		return nil
	}
	start, records, written := time.Now(), 0, 0
	var lr *flow.Reader
	err = s.retrying(ctx, "read the log", func() (err error) {
		lr, err = flow.Read(ctx, s.js, sj.LogStream(), subj, from, flow.Buffer{Msgs: 16, Bytes: ReadBytes}, s.log)
		return err
	})
	if err != nil {
		return err
	}
	defer lr.Stop()
	first := true
	for seq := from; seq < last; {
		var m jetstream.Msg
		select {
		case m = <-lr.C:
		case <-ctx.Done():
			return ctx.Err()
		}
		rec, at, err := decodeLog(m)
		if err != nil {
			return err
		}
		seq = at
		if unsent && (seq <= s.st.Log || first) {
			// A record the state's transactions logged (the first after s.st.Log may be
			// the state's own) holds entries from loaded.Unsent to loaded.Outbox: sent
			// record by record (Send waits while too many are in flight), each before
			// any record after the state's sends its own.
			if err := s.out.Send(ctx, s.unsentIn(nil, rec, seq, &loaded)); err != nil {
				return err
			}
		}
		if seq <= s.st.Log {
			continue
		}
		applied, fromWrites, err := s.applyLogged(ctx, a, rec, seq, c, first, true)
		if err != nil {
			return err
		}
		first = first && !applied
		if applied {
			records++
		}
		if applied && fromWrites {
			written++
			s.stats.ReplayedWrites.Add(1)
		}
	}
	if a.forgot { // what the stage kept in RAM was read before the writes
		if err := s.refresh(); err != nil {
			return err
		}
		a.forgot = false
	}
	s.log.Debug("replayed the partition's log", "records", records, "from writes", written, "position", s.st.Pos, "took", time.Since(start))
	return nil
}

// decodeLog decodes log message m, a record, and returns it with its sequence in the
// log stream.
func decodeLog(m jetstream.Msg) (*stagelog.Record, uint64, error) {
	md, err := m.Metadata()
	if err != nil {
		return nil, 0, fmt.Errorf("log message without metadata: %w", err)
	}
	seq := md.Sequence.Stream
	rec, err := stagelog.DecodeRecord(m.Data())
	if err != nil {
		return nil, seq, fmt.Errorf("log record %d: %w", seq, err)
	}
	return rec, seq, nil
}

// logRecord applies rec, log record seq, to the events it covers, read from r. The
// first record read after loading a state may be the state's own, which it only takes
// as its position (applied false). send sends the record's outbox too: a standby
// (Mirror) leaves that to the owner.
func (s *Stage) logRecord(ctx context.Context, rec *stagelog.Record, seq uint64, r *flow.Reader, c *coalescer, first, send bool) (applied bool, err error) {
	if own, err := s.ownRecord(rec, seq, first); own || err != nil {
		return false, err
	}
	var msgs []jetstream.Msg
	pos := s.st.Pos
	for pos < rec.State.Pos {
		select {
		case em := <-r.C:
			emd, err := em.Metadata()
			if err != nil {
				return false, fmt.Errorf("message without metadata: %w", err)
			}
			pos = emd.Sequence.Stream
			msgs = append(msgs, em)
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	if pos != rec.State.Pos {
		return false, fmt.Errorf("%w: log record %d ends at event %d, which is no longer in the events stream", ErrGap, seq, rec.State.Pos)
	}
	return true, s.applyRecord(ctx, msgs, rec, seq, c, send)
}

// ownRecord reports whether rec, log record seq, is the state's own — the first record
// read after loading a state may be (first) — which it then takes as its position; and
// ErrGap when rec does not continue the state.
func (s *Stage) ownRecord(rec *stagelog.Record, seq uint64, first bool) (bool, error) {
	own := rec.Prev != s.st.Pos || (rec.State.N != 0 && rec.State.N == s.st.N)
	if first && own && rec.State.Pos == s.st.Pos {
		// The state's transaction committed naming the record before its own (see
		// stagelog.State.Log): this record is the state's own. (A transaction that
		// consumed no message ends where the one before did: N tells them apart.)
		s.st.Log = seq
		return true, nil
	}
	if rec.Prev != s.st.Pos {
		return false, fmt.Errorf("%w: log record %d continues position %d but the state is at %d; restore a newer backup",
			ErrGap, seq, rec.Prev, s.st.Pos)
	}
	return false, nil
}

// applyRecord applies msgs in one transaction that commits rec's state and outbox, and
// deletes the entries rec's owner deleted; send sends the outbox.
func (s *Stage) applyRecord(ctx context.Context, msgs []jetstream.Msg, rec *stagelog.Record, seq uint64, c *coalescer, send bool) error {
	// The record's outbox is what the transaction sends: the deltas and hop batches its
	// events would make again are not needed.
	c.discard = true
	defer func() { c.discard = false }()
	txn := s.db.NewTxn(true)
	defer txn.Discard()
	w := s.newWork(txn, c, rec.Dead)
	defer w.close()
	_, pos, err := s.applyMsgs(txn, msgs, w)
	if err != nil {
		return err
	}
	if len(msgs) == 0 {
		pos = s.st.Pos
	}
	// The held hop batches the record's transaction released, and those it
	// dead-lettered, as its state says.
	if err := s.release(txn, w, pos, rec.State.Hops, rec.DeadHops); err != nil {
		return err
	}
	if err := stagelog.DeleteOutbox(txn, s.cfg.Partition, rec.Acked, s.stored); err != nil {
		return err
	}
	st := rec.State
	st.Log = seq
	s.published = append(s.published, s.out.Published()...)
	if err := s.write(txn, &st, rec.Outbox, w); err != nil {
		return err
	}
	if err := txn.Commit(); err != nil {
		return fmt.Errorf("cannot commit: %w", err)
	}
	s.noteCommitted(&st)
	s.committed(st, w)
	if !send {
		return nil
	}
	s.sentFrom(seq, rec.Outbox)
	return s.out.Send(ctx, rec.Outbox)
}

// retrying calls fn until it succeeds or ctx ends, with backoff: a request NATS did not
// answer in time (an overloaded cluster, a stream leader being elected) is transient,
// and stopped the whole process when a new owner's replay read the log.
func (s *Stage) retrying(ctx context.Context, what string, fn func() error) error {
	wait := backoff.New(10*time.Millisecond, time.Second)
	for {
		err := fn()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := s.retry(ctx, wait, "cannot "+what+" yet; retrying", err); err != nil {
			return err
		}
	}
}

// retry counts a failed attempt, says so at most once a second, and waits for the next.
func (s *Stage) retry(ctx context.Context, wait *backoff.Backoff, msg string, err error) error {
	s.stats.Retries.Add(1)
	if time.Since(s.warned) >= time.Second {
		s.log.Warn(msg, "partition", s.cfg.Partition, "err", err)
		s.warned = time.Now()
	}
	return wait.Wait(ctx)
}
