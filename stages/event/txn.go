package event

import (
	"context"
	"errors"
	"fmt"

	"github.com/klauspost/compress/s2"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/stages/hop"
	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/delivery"
	"github.com/tally-dev/tally/store/stagelog"
)

// A partition's transactions: the messages it takes, committed in as few as fit in one
// Badger transaction, each logged before it commits, then its outbox sent.

// process commits msgs in as few transactions as fit, then publishes each one's outbox;
// then the hop batches a filled gap released, in transactions of their own.
func (s *Stage) process(ctx context.Context, msgs []jetstream.Msg, c *coalescer) error {
	for len(msgs) > 0 {
		n, err := s.commit(ctx, msgs, c)
		if err != nil {
			return err
		}
		msgs = msgs[n:]
	}
	for hop.Releasable(s.st.Hops) && ctx.Err() == nil {
		if _, err := s.commit(ctx, nil, c); err != nil {
			return err
		}
	}
	return nil
}

// commit applies a prefix of msgs that fits in one transaction, with as many held hop
// batches as fit after them (up to maxRelease), and returns the prefix's length; with no
// msgs it only releases. The transaction takes messages until it is three quarters full
// with what it writes at its end (work.full, an estimate); one that does not fit all the
// same is discarded and tried again releasing half as many, then with the messages that
// did fit (or half of them, when what overflowed came after the last message); a
// message, or a held batch, that does not fit alone is dead-lettered whole — a hop batch
// still filling its number.
func (s *Stage) commit(ctx context.Context, msgs []jetstream.Msg, c *coalescer) (int, error) {
	n, budget := len(msgs), s.budget
	for {
		fit, released, err := s.try(ctx, msgs[:n], c, nil, budget)
		if !errors.Is(err, errTooBig) {
			if err != nil {
				return 0, err
			}
			if released == budget { // it fitted: the next may release more
				s.budget = min(2*max(budget, 1), maxRelease)
			}
			return fit, nil
		}
		s.stats.Splits.Add(1)
		switch {
		case released > 1 || (released == 1 && n > 0):
			budget = released / 2
			s.budget = max(budget, 1)
		case n == 0:
			budget = -1 // the one held batch released does not fit alone
		case n == 1:
			seq, err := streamSeq(msgs[0])
			if err != nil {
				return 0, err
			}
			s.log.Warn("a message does not fit in one transaction: dead-lettered", "seq", seq)
			_, _, err = s.try(ctx, msgs[:1], c, []uint64{seq}, 0)
			if errors.Is(err, errTooBig) {
				// Its dead letter, cut to fit a NATS message, and the state do not fit
				// in one log record together (a state of many partitions): the dead
				// letter goes without the message's bytes (DeadLetter.Size says how many).
				s.bare = true
				_, _, err = s.try(ctx, msgs[:1], c, []uint64{seq}, 0)
				s.bare = false
			}
			return 1, err
		case fit < n:
			n = max(fit, 1)
		default:
			n /= 2
		}
	}
}

// try applies msgs, or the prefix of them that leaves the transaction full (work.full),
// and releases up to budget held hop batches in one transaction, logs it when the stage
// logs, commits it and sends its outbox; fit says how many messages it applied. dead
// lists messages to dead-letter whole instead of applying. On errTooBig nothing is
// committed, fit says how many messages were applied before it and released how many
// held batches.
func (s *Stage) try(ctx context.Context, msgs []jetstream.Msg, c *coalescer, dead []uint64, budget int) (fit, released int, err error) {
	txn := s.db.NewTxn(true)
	defer txn.Discard()
	w := s.newWork(txn, c, dead)
	defer w.close()
	w.budget, w.bounded = budget, true
	fit, pos, err := s.applyMsgs(txn, msgs, w)
	if err != nil {
		return fit, 0, tooBig(err)
	}
	if len(msgs) == 0 {
		pos = s.st.Pos
	}
	msgs = msgs[:fit] // those after the bound (work.full) go in the next transaction
	if err := s.release(txn, w, pos, nil, nil); err != nil {
		return len(msgs), w.released, tooBig(err)
	}
	// A post's count of viewers is set to what its sketch counts at the end of the
	// transaction (counting a dense sketch reads all of it: once, not per view), by
	// the one partition that applies the post's views, in order.
	w.viewers.Counts(func(p, n uint64) { w.c.add(s.fields.viewers, pipeline.ID(p), pipeline.OpSet, int64(n)) })
	st, outbox, err := s.next(pos, w)
	if err != nil {
		return len(msgs), w.released, err
	}
	s.published = append(s.published, s.out.Published()...)
	if s.cfg.Log {
		s.unsent(&st)
	} else {
		st.Unsent, st.UnsentLog = 0, 0 // the outbox goes to Badger (write)
	}
	if err := s.write(txn, &st, outbox, w); err != nil {
		return len(msgs), w.released, tooBig(err)
	}
	if s.cfg.Log {
		rec := stagelog.Record{Prev: s.st.Pos, State: st, Outbox: outbox, Dead: w.dead, DeadHops: w.deadHops, Acked: s.published[:w.deleted]}
		data, err := s.encodeRecord(txn, &rec)
		if err != nil {
			return len(msgs), w.released, err
		}
		if len(data) > s.cfg.MaxPayload-1024 {
			return len(msgs), w.released, errTooBig
		}
		if st.Log, err = s.appendLog(ctx, data, st.Pos, st.N); err != nil {
			return len(msgs), w.released, err
		}
		// The state names its own record when there is room for one more write; if
		// not, it names the one before, and a reload takes this one as its own.
		if err := stagelog.Put(txn, s.cfg.Partition, &st); err != nil && !errors.Is(err, cold.ErrTxnTooBig) {
			return len(msgs), w.released, err
		}
	}
	if err := txn.Commit(); err != nil {
		return len(msgs), w.released, fmt.Errorf("cannot commit: %w", err)
	}
	s.noteCommitted(&st)
	s.committed(st, w)
	s.sentFrom(st.Log, outbox)
	if s.cfg.PurgeLog {
		s.purgeLog(ctx)
	}
	return len(msgs), w.released, s.out.Send(ctx, outbox)
}

// tooBig turns the store's refusal of a write (cold.ErrTxnTooBig) into errTooBig.
func tooBig(err error) error {
	if errors.Is(err, cold.ErrTxnTooBig) {
		return fmt.Errorf("%w: %w", errTooBig, err)
	}
	return err
}

// maxDeletes is the most acknowledged outbox entries one transaction deletes: after a
// backlog they are many, and a transaction must stay small enough for its messages.
const maxDeletes = 4096

// write writes the transaction's likes and reader states, deletes the acknowledged
// outbox entries Badger holds, writes the new ones there unless the log keeps them
// (st.Unsent, outbox.go), and writes the state in txn. The state names the log record
// before this transaction's (see stagelog.State.Log).
func (s *Stage) write(txn *cold.Txn, st *stagelog.State, outbox []delivery.OutboxEntry, w *work) error {
	p := s.cfg.Partition
	if err := w.flush(txn, likesBatch(st)); err != nil {
		return err
	}
	w.deleted = min(len(s.published), maxDeletes)
	if err := stagelog.DeleteOutbox(txn, p, s.published[:w.deleted], s.stored); err != nil {
		return err
	}
	if st.Unsent == 0 {
		for i := range outbox {
			if err := stagelog.PutOutbox(txn, p, &outbox[i]); err != nil {
				return err
			}
		}
		if len(outbox) > 0 {
			w.stored = outbox[len(outbox)-1].Seq
		}
	}
	return stagelog.Put(txn, p, st)
}

// encodeRecord encodes rec, the log record of txn, with what txn has written when the
// stage's records carry it (Config.LogWrites) and it fits in a NATS message with the
// rest of the record; without it when not.
func (s *Stage) encodeRecord(txn *cold.Txn, rec *stagelog.Record) ([]byte, error) {
	if s.cfg.LogWrites {
		room := s.cfg.MaxPayload - 1024
		// Compressed, the writes take a third of their bytes or less (s2: 17 bytes an
		// event of the likes mix where they wrote 46).
		writes, ok := txn.AppendWrites(s.writes[:0], 3*room)
		if ok {
			s.packed = s2.Encode(s.packed[:cap(s.packed)], writes)
			rec.Writes = s.packed
		}
		s.writes, s.packed = kept(writes), kept(s.packed)
		if ok {
			data, err := stagelog.EncodeRecord(rec)
			if err != nil || len(data) <= room {
				return data, err
			}
			rec.Writes = nil
		}
		s.stats.WritesLeftOut.Add(1)
	}
	return stagelog.EncodeRecord(rec)
}

// kept is b emptied to be used again, or nil when it is larger than keepWrites.
func kept(b []byte) []byte {
	if cap(b) > keepWrites {
		return nil
	}
	return b[:0]
}

// keepWrites is the most room a stage keeps for its records' writes between
// transactions, as they were written and compressed: a few hundred kB for most (40–90
// bytes an event of the benchmarks, before compression).
const keepWrites = 1 << 20

// likesBatch names the liker chunks of the transaction that ends in state st: unique in
// the partition, though a transaction that consumed no message ends at the position of
// the one before (its number tells them apart), and above every position, which named
// them before transactions were numbered.
func likesBatch(st *stagelog.State) uint64 {
	return pipeline.SeqOf(st.Pos, int(st.N%pipeline.SeqSpan))
}

// committed makes st the stage's state once its transaction has committed.
func (s *Stage) committed(st stagelog.State, w *work) {
	s.st, s.published = st, s.published[w.deleted:]
	s.stored = max(s.stored, w.stored)
	s.res.Keep(w.readers.Seen(), w.likes)
	s.seen.Keep(w.viewers)
	s.stats.Txns.Add(1)
	s.stats.LikeKeys.Add(int64(w.likes.Writes()))
	s.stats.HopDups.Add(w.dups)
	s.stats.HopGaps.Add(w.in.Stats.GapsSkipped.Load())
	s.stats.Forwarded.Add(w.forwarded)
	s.stats.Deltas.Add(w.deltas)
	w.counted.addTo(s.stats)
	s.now = max(s.now, w.now)
	s.pos.Store(st.Pos)
	s.countState()
}
