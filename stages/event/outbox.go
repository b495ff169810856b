package event

import (
	"github.com/tally-dev/tally/store/delivery"
	"github.com/tally-dev/tally/store/stagelog"
)

// A stage that logs keeps its outbox in its log, not in Badger: every transaction's
// record holds the entries it wrote already (stagelog.Record.Outbox), and its state
// says from which entry on, and from which record, they may not have been stored yet
// (stagelog.State.Unsent, UnsentLog). A stage that loads the state sends those again
// from the log (replay); one whose state says nothing (a stage that does not log, a
// state of a version before) keeps them in Badger as before, and deletes them there
// once stored. Written to Badger, the entries were 44 of the 103 bytes an event of JSON
// batches split by partition wrote, each written at its commit, deleted once stored,
// then flushed and compacted with the rest.

// logged is a log record that holds entries possibly not stored yet: the first of
// them, and the record's sequence in the log stream.
type logged struct{ first, log uint64 }

// unsent sets st's Unsent and UnsentLog before the transaction that ends in st is
// logged: the oldest entry not yet known to be stored and the record holding it, or,
// with none, the transaction's own first entry and the record before its own (the
// next record read from there is its own). Badger's entries (up to s.stored) are not
// the log's to send.
func (s *Stage) unsent(st *stagelog.State) {
	seq, ok := s.out.Oldest(s.stored)
	if !ok {
		s.inLog = s.inLog[:0]
		st.Unsent, st.UnsentLog = s.st.Outbox+1, s.st.Log
		return
	}
	i := 0
	for i+1 < len(s.inLog) && s.inLog[i+1].first <= seq {
		i++
	}
	if len(s.inLog) == 0 || s.inLog[0].first > seq {
		// Not a record this stage knows of (it cannot be: each entry sent came from
		// one): the log is read from its first record.
		st.Unsent, st.UnsentLog = seq, 0
		return
	}
	s.inLog = s.inLog[:copy(s.inLog, s.inLog[i:])]
	st.Unsent, st.UnsentLog = seq, s.inLog[0].log
}

// sentFrom notes that log record seq holds entries, which have just been sent.
func (s *Stage) sentFrom(seq uint64, entries []delivery.OutboxEntry) {
	if s.cfg.Log && len(entries) > 0 && entries[0].Seq > s.stored {
		s.inLog = append(s.inLog, logged{first: entries[0].Seq, log: seq})
	}
}

// unsentIn appends to out the entries of record rec (log record seq) that state st may
// not have stored: from st.Unsent up to st.Outbox, the last its transactions wrote.
func (s *Stage) unsentIn(out []delivery.OutboxEntry, rec *stagelog.Record, seq uint64, st *stagelog.State) []delivery.OutboxEntry {
	n := len(out)
	for _, e := range rec.Outbox {
		if e.Seq >= st.Unsent && e.Seq <= st.Outbox {
			out = append(out, e)
		}
	}
	if len(out) > n {
		s.inLog = append(s.inLog, logged{first: out[n].Seq, log: seq})
	}
	return out
}

// noteCommitted keeps, for Outbox, what the outbox holds once the transaction ending
// in st commits: its last entry, and the oldest not known to be stored when it
// committed (its own first, when every earlier one is). As when every entry was a key
// in Badger, deleted by the transaction after its acknowledgement, a stage that goes
// idle says its last entries are unacknowledged until its next transaction: an audit
// then waits until the stage is caught up with its stream, so that it also covers the
// events stored when it began (a repair another audit just published).
func (s *Stage) noteCommitted(st *stagelog.State) {
	oldest, ok := s.out.Oldest(0)
	if !ok {
		oldest = s.st.Outbox + 1
	}
	s.setOutbox(st.Outbox, oldest)
}

// setOutbox sets what Outbox reports.
func (s *Stage) setOutbox(last, oldest uint64) {
	s.outMu.Lock()
	s.outLast, s.outOldest = last, oldest
	s.outMu.Unlock()
}

// Outbox tells how far the stage's outbox is published, for an audit that must know
// when what the stage had committed is in the streams: last is the last entry a
// committed transaction wrote, oldest the oldest entry not known to be stored when it
// committed (last+1 when every one was; see noteCommitted). Every entry below oldest is
// stored. Safe from any goroutine; 0, 0 before the stage has loaded its state.
func (s *Stage) Outbox() (last, oldest uint64) {
	s.outMu.Lock()
	defer s.outMu.Unlock()
	return s.outLast, s.outOldest
}
