package event

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/stages/hop"
	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/delivery"
	"github.com/tally-dev/tally/store/graph"
	"github.com/tally-dev/tally/store/stagelog"
	"github.com/tally-dev/tally/store/unread"
	"github.com/tally-dev/tally/store/viewers"
)

// maxDeltas is the most deltas in one delta batch: a transaction's deltas for one
// counter partition are cut into batches this size, each well under NATS's payload.
const maxDeltas = 8192

// maxHopEvents is the most events in one hop batch (before halving by size).
const maxHopEvents = 2000

// targetFill is how full a transaction may be, with what it writes at its end, and
// still take another message (see work.full). The estimate came within 4 % of what
// Badger then counted (transactions stopped at 0.5 ended at 0.45–0.54).
const targetFill = 0.75

// maxRelease is the most held hop batches one transaction releases (before halving,
// when what they make does not fit): a gap that fills may free up to hop.Window batches
// of each source, and the rest go in the transactions after it.
const maxRelease = 64

// work is what one transaction attempt makes besides its Badger writes; it is thrown
// away with the transaction when that does not fit, so nothing of the stage's state is
// touched before the commit.
type work struct {
	s        *Stage
	c        *coalescer
	in       hop.In           // a copy of the state's hop marks; payloads in the txn
	fwd      []hopOut         // by partition: events for other partitions (Stage.fwd)
	fwdOrder []int            // the partitions forwarded to, in the order of their first event
	likes    *graph.Likes     // the transaction's likes, written at its end
	readers  *unread.Readers  // the reader states it read and wrote
	viewers  *viewers.Viewers // the sketches of the posts it counted views of
	dlq      []delivery.OutboxEntry
	deadSeqs []uint64 // messages to dead-letter whole
	dead     []uint64 // those dead-lettered so far

	// budget is the most held hop batches the transaction releases; -1 releases one and
	// dead-letters it (it does not fit in a transaction alone). released counts them,
	// deadHops those dead-lettered.
	budget   int
	released int
	deadHops []delivery.HeldRef

	counted counted // what it adds to the stats once it commits

	// bounded: the transaction takes no more messages once full (not in a replay, which
	// applies a log record's messages whatever they make).
	bounded bool

	hop                     bool   // applying events of a hop batch: handed over from another partition
	now                     uint32 // the Unix minute the newest message applied was stored at (windows)
	ts                      int64  // the time of the event being applied (windows), for those it causes elsewhere
	dups, forwarded, deltas int64  // counted once the transaction commits
	deleted                 int    // acknowledged outbox entries the transaction deletes
	stored                  uint64 // the last outbox entry the transaction writes to Badger (0: none)
}

// counted is what a transaction's messages add to the stats (Stats), added once it
// commits: an attempt thrown away (too big to commit) counted its events, messages and
// dead letters as well as the attempt that committed them.
type counted struct {
	messages, unchanged, forgotten, dead int64
	byType                               [pipeline.NumTypes]int64 // events applied, by pipeline.TypeIndex
}

// eventTypes are pipeline.Types, by pipeline.TypeIndex.
var eventTypes = pipeline.Types()

func (c *counted) addTo(st *Stats) {
	st.Messages.Add(c.messages)
	st.Unchanged.Add(c.unchanged)
	st.Forgotten.Add(c.forgotten)
	st.Dead.Add(c.dead)
	for i, n := range c.byType {
		if n != 0 {
			st.ByType[eventTypes[i]].Add(n)
			st.Events.Add(n)
		}
	}
}

func (s *Stage) newWork(txn *cold.Txn, c *coalescer, dead []uint64) *work {
	c.reset()
	marks := make(map[uint32]*delivery.Mark, len(s.st.Hops))
	for src, m := range s.st.Hops {
		marks[src] = &delivery.Mark{Through: m.Through, Above: slices.Clone(m.Above), Held: slices.Clone(m.Held)}
	}
	in := hop.In{Marks: marks, Store: stageHeld{txn: txn, p: s.cfg.Partition}, Log: s.log, Stats: &hop.InStats{}}
	if s.likes == nil {
		s.likes = graph.NewLikes(s.cfg.Partition, s.res)
	} else {
		s.likes.Reset(s.res) // the last transaction's records are the Resident's now, or dropped
	}
	likes := s.likes
	likes.ReadChunksFrom(s.db)
	if s.fwd == nil {
		s.fwd = make([]hopOut, s.cfg.Partitions)
	}
	for q := range s.fwd {
		s.fwd[q].reset()
	}
	return &work{s: s, c: c, in: in, fwd: s.fwd, deadSeqs: dead, now: s.now,
		likes: likes, readers: unread.NewReaders(s.cfg.Partition, s.res), viewers: viewers.New(s.cfg.Partition, s.seen)}
}

// hopOut is what a transaction forwards to one partition: its events encoded as it
// forwards them (pipeline.AppendEvent), event i ending at ends[i]. A stage keeps one
// for each partition, reused by every transaction, where each transaction copied each
// event forwarded into a slice it grew, and encoded them all at its end.
type hopOut struct {
	enc  []byte
	ends []int
}

// reset empties o for the next transaction, letting go of room grown past 1 MiB of
// events (a transaction forwarding that much to one partition is rare).
func (o *hopOut) reset() {
	if cap(o.enc) > 1<<20 {
		*o = hopOut{}
		return
	}
	o.enc, o.ends = o.enc[:0], o.ends[:0]
}

// add encodes e after the events in o.
func (o *hopOut) add(e *pipeline.Event) {
	o.enc = pipeline.AppendEvent(o.enc, e)
	o.ends = append(o.ends, len(o.enc))
}

// close ends what the transaction's work opened besides the transaction.
func (w *work) close() { w.likes.Close() }

// stageHeld keeps the payloads of the hop batches a partition holds above a gap in its
// transaction (stagelog.PutHeld): written with the marks that hold them, deleted with
// the marks that no longer do, never in the state or its log record.
type stageHeld struct {
	txn *cold.Txn
	p   int
}

func (h stageHeld) Put(src uint32, seq uint64, data []byte) error {
	return stagelog.PutHeld(h.txn, h.p, src, seq, data)
}

func (h stageHeld) Get(src uint32, seq uint64) ([]byte, error) {
	return stagelog.GetHeld(h.txn, h.p, src, seq)
}

func (h stageHeld) Delete(src uint32, seq uint64) error {
	return stagelog.DeleteHeld(h.txn, h.p, src, seq)
}

// flush writes what the transaction changed of likes (its liker chunks under batch) and
// reader states, each once.
func (w *work) flush(txn *cold.Txn, batch uint64) error {
	if err := w.likes.Flush(txn, batch); err != nil {
		return err
	}
	if err := w.viewers.Flush(txn); err != nil {
		return err
	}
	return w.readers.Flush(txn, batch)
}

// full reports whether the transaction, with what it writes at its end (like records
// and liker chunks, reader states, its outbox's hop and delta batches), has taken
// targetFill of what Badger accepts in one (cold.Txn.FillWith), or its outbox that much
// of a log record: then it takes no more messages. Without it a transaction took every
// message read ahead (up to MaxBatch), and when what they made did not fit, all that
// work was thrown away and done again with half the messages: batches not split by
// partition, whose hop batches carry hundreds of events each, threw away an attempt
// every few transactions. What is pending is estimated (a hop event at 64 bytes, a
// delta at 16, a reader state at 128); a transaction that still does not fit is cut as
// before (Stage.commit).
func (w *work) full(txn *cold.Txn) bool {
	if !w.bounded {
		return false
	}
	lb, lk := w.likes.Pending()
	rb, rk := w.readers.Pending()
	deltas := 0
	for _, d := range w.c.order {
		dd := w.c.byDest[d]
		deltas += len(dd.deltas) + len(dd.windowed)
	}
	outbox := 64*int(w.forwarded) + 16*deltas
	if w.s.cfg.Log && float64(outbox) >= targetFill*float64(w.s.cfg.MaxPayload) {
		return true
	}
	return txn.FillWith(lb+rb+outbox, lk+rk+len(w.fwdOrder)+len(w.c.order)) >= targetFill
}

func (w *work) forward(q int, e *pipeline.Event) {
	w.forwarded++
	if w.c.discard {
		return // a standby's: the record's outbox carries what its owner forwarded
	}
	if len(w.fwd[q].ends) == 0 {
		w.fwdOrder = append(w.fwdOrder, q)
	}
	w.fwd[q].add(e)
}

// next returns the state after the transaction, ending at stream position pos, and its
// outbox: dead letters, hop batches to other partitions, delta batches, each numbered
// on without gaps per destination.
func (s *Stage) next(pos uint64, w *work) (stagelog.State, []delivery.OutboxEntry, error) {
	p := s.cfg.Partition
	st := s.st // maps are copied below, never written in place
	st.Pos, st.N = pos, s.st.N+1
	st.Seqs = maps.Clone(s.st.Seqs)
	if st.Seqs == nil {
		st.Seqs = map[string]uint64{}
	}
	st.HopSeqs = maps.Clone(s.st.HopSeqs)
	if len(w.fwdOrder) > 0 && st.HopSeqs == nil {
		st.HopSeqs = map[uint32]uint64{}
	}
	st.Hops = w.in.Marks
	if len(st.Hops) == 0 {
		st.Hops = nil
	}
	outbox := w.dlq
	for _, q := range w.fwdOrder {
		outbox = s.hopEntries(outbox, &st, q, &w.fwd[q])
	}
	for _, d := range w.c.order {
		key := d.String()
		deltas, windows := w.c.byDest[d].deltas, w.c.byDest[d].windowDeltas()
		for len(deltas) > 0 || len(windows) > 0 {
			k, kw := min(len(deltas), maxDeltas), min(len(windows), maxDeltas)
			st.Seqs[key]++
			b := pipeline.DeltaBatch{Source: uint32(p), Seq: st.Seqs[key], Deltas: deltas[:k], Windows: windows[:kw]}
			windows = windows[kw:]
			outbox = append(outbox, delivery.OutboxEntry{
				Subject: s.cfg.Subjects.Delta(d.family, d.partition),
				MsgID:   pipeline.DeltaMsgID(p, key, b.Seq),
				Data:    pipeline.AppendDeltaBatch(make([]byte, 0, b.Size()), &b),
			})
			w.deltas += int64(k)
			deltas = deltas[k:]
		}
	}
	for i := range outbox {
		st.Outbox++
		outbox[i].Seq = st.Outbox
	}
	return st, outbox, nil
}

// hopEntries appends the hop batches carrying the events of out to partition q, each
// numbered next and small enough for NATS: at most maxHopEvents events, halved while the
// batch is over half of MaxPayload (down to one event). The events were encoded once,
// as they were forwarded, and the halving measures the running size of the encoded
// events, so a batch cut many times costs no more than one; the bytes are those of the
// whole batch encoded at its final size, copied out of out.
func (s *Stage) hopEntries(outbox []delivery.OutboxEntry, st *stagelog.State, q int, out *hopOut) []delivery.OutboxEntry {
	p := s.cfg.Partition
	enc, ends := out.enc, out.ends // event i is enc[ends[i-1]:ends[i]]
	var headBuf [48]byte           // the longest head is 35 bytes
	subject := s.cfg.Subjects.Event(pipeline.TypeHop, s.keys[q])
	for i := 0; i < len(ends); {
		seq := st.HopSeqs[uint32(q)] + 1
		from := 0
		if i > 0 {
			from = ends[i-1]
		}
		k := min(len(ends)-i, maxHopEvents)
		head := pipeline.AppendHopBatchHead(headBuf[:0], uint32(p), seq, k)
		for len(head)+ends[i+k-1]-from > s.cfg.MaxPayload/2 && k > 1 {
			k /= 2
			head = pipeline.AppendHopBatchHead(headBuf[:0], uint32(p), seq, k)
		}
		data := make([]byte, 0, len(head)+ends[i+k-1]-from)
		data = append(append(data, head...), enc[from:ends[i+k-1]]...)
		st.HopSeqs[uint32(q)] = seq
		outbox = append(outbox, delivery.OutboxEntry{
			Subject: subject,
			MsgID:   pipeline.HopMsgID(p, q, seq),
			Data:    data,
		})
		i += k
	}
	return outbox
}

// applyHop applies a hop batch of another partition: in its source's order, exactly
// once, held when it comes above a gap. One that must be dead-lettered still fills its
// number, or its source's later batches would wait behind it.
func (s *Stage) applyHop(txn *cold.Txn, m jetstream.Msg, seq uint64, w *work) error {
	b, err := s.dec.DecodeHop(m.Data())
	if err == nil && (int(b.Source) >= s.cfg.Partitions || int(b.Source) == s.cfg.Partition) {
		err = fmt.Errorf("%w: hop batch from partition %d", pipeline.ErrBadEvent, b.Source)
	}
	if err != nil {
		w.deadLetter(m, seq, -1, m.Data(), err)
		return s.fillHop(m, w)
	}
	v, err := w.in.Offer(b.Source, b.Seq, m.Data())
	switch {
	case err != nil:
		return err
	case v == hop.Dup:
		w.dups++
	case v == hop.Apply:
		return s.applyHopEvents(txn, b, seq, w)
	}
	return nil
}

// fillHop fills the number of hop message m, read from its message id, with nothing: it
// was dead-lettered.
func (s *Stage) fillHop(m jetstream.Msg, w *work) error {
	src, dest, seq, ok := pipeline.ParseHopMsgID(m.Headers().Get(jetstream.MsgIDHeader))
	if !ok || dest != s.cfg.Partition || src >= s.cfg.Partitions || src == s.cfg.Partition {
		return nil // not one of Tally's numbered hop batches to this partition
	}
	_, err := w.in.Skip(uint32(src), seq)
	return err
}

// applyHopEvents applies the events of hop batch b, stored in the events stream at or
// before place.
func (s *Stage) applyHopEvents(txn *cold.Txn, b *pipeline.HopBatch, place uint64, w *work) error {
	w.hop = true
	defer func() { w.hop = false }()
	for i := range b.Events {
		e := &b.Events[i]
		if e.Seq == 0 {
			// Sent by code that did not place events: placed where it is applied.
			e.Seq = pipeline.SeqOf(place, i)
		}
		if err := s.applyEvent(txn, e, true, w); err != nil {
			return fmt.Errorf("cannot apply %s event of hop batch %d.%d: %w", e.Type, b.Source, b.Seq, err)
		}
	}
	return nil
}

// release applies held hop batches that are now in order: up to w.budget of them, or,
// replaying a log record, each source's up to the marks of the record's state (until)
// and dead-lettering those the record dead-lettered (deadHops). place is where events
// sent without one are placed.
func (s *Stage) release(txn *cold.Txn, w *work, place uint64, until map[uint32]*delivery.Mark, deadHops []delivery.HeldRef) error {
	apply := func(src uint32, seq uint64, data []byte) error {
		w.released++
		switch {
		case len(data) == 0:
			return nil // a number filled by a dead-lettered batch
		case w.budget < 0 || slices.Contains(deadHops, delivery.HeldRef{Src: src, Seq: seq}):
			w.deadHop(src, seq, data)
			return nil
		}
		b, err := s.dec.DecodeHop(data)
		if err != nil {
			return err // it decoded when it was held
		}
		return s.applyHopEvents(txn, b, place, w)
	}
	if until != nil {
		for _, src := range slices.Sorted(maps.Keys(until)) {
			for m := w.in.Marks[src]; m != nil && m.Through < until[src].Through; {
				seq, data, ok, err := w.in.NextFrom(src)
				if err == nil && !ok {
					err = fmt.Errorf("%w: the log record releases hop batches of partition %d up to %d, which the state does not hold", ErrGap, src, until[src].Through)
				}
				if err == nil {
					err = apply(src, seq, data)
				}
				if err != nil {
					return err
				}
			}
		}
		return nil
	}
	limit := w.budget
	if limit < 0 {
		limit = 1 // to dead-letter
	}
	for w.released < limit {
		src, seq, data, ok, err := w.in.Next()
		if err != nil || !ok {
			return err
		}
		if err := apply(src, seq, data); err != nil {
			return err
		}
	}
	return nil
}

// deadHop dead-letters held hop batch seq of src, which does not fit in a transaction
// alone.
func (w *work) deadHop(src uint32, seq uint64, data []byte) {
	s := w.s
	w.counted.dead++
	s.log.Warn("a held hop batch does not fit in one transaction: dead-lettered", "source", src, "seq", seq)
	w.deadHops = append(w.deadHops, delivery.HeldRef{Src: src, Seq: seq})
	w.dlq = append(w.dlq, delivery.OutboxEntry{
		Subject: s.cfg.Subjects.DLQ("event", s.cfg.Partition),
		MsgID:   pipeline.DeadLetterMsgID("held", s.cfg.Partition, seq, int(src)),
		Data: s.deadLetterData(DeadLetter{
			Error:   fmt.Sprintf("%v: hop batch %d of partition %d does not fit in one transaction", pipeline.ErrBadEvent, seq, src),
			Subject: s.cfg.Subjects.Event(pipeline.TypeHop, s.keys[s.cfg.Partition]), Index: -1,
		}, data),
	})
}

// DeadLetter is the JSON payload of a dead-letter entry: a whole message (Index -1) or
// one event of a batch (Data is then that event as JSON). Data is cut to fit in a NATS
// message; Size is then its whole length. A consumer of dead letters recognises one sent
// again by its subject, seq and index.
type DeadLetter struct {
	Error   string      `json:"error"`
	Subject string      `json:"subject"`
	Seq     uint64      `json:"seq"`
	Index   int         `json:"index"`
	Header  nats.Header `json:"header,omitempty"`
	Data    []byte      `json:"data"`
	Size    int         `json:"size,omitempty"`
}

func (w *work) deadLetter(m jetstream.Msg, seq uint64, index int, data []byte, reason error) {
	s := w.s
	w.counted.dead++
	w.dlq = append(w.dlq, delivery.OutboxEntry{
		Subject: s.cfg.Subjects.DLQ("event", s.cfg.Partition),
		MsgID:   pipeline.DeadLetterMsgID("event", s.cfg.Partition, seq, index),
		Data:    s.deadLetterData(DeadLetter{Error: reason.Error(), Subject: m.Subject(), Seq: seq, Index: index, Header: m.Headers()}, data),
	})
}

// deadLetterData encodes dl with as much of data as fits in a NATS message.
func (s *Stage) deadLetterData(dl DeadLetter, data []byte) []byte {
	const maxErr = 4096
	if len(dl.Error) > maxErr {
		dl.Error = dl.Error[:maxErr] + "…"
	}
	// JSON carries data as base64 (4/3) beside the rest: keep well under the limit.
	room := (s.cfg.MaxPayload - 8192 - len(dl.Subject) - len(dl.Error)) * 3 / 4
	for k, vs := range dl.Header {
		room -= len(k) + len(fmt.Sprint(vs))
	}
	if room < 0 || s.bare {
		dl.Header, room = nil, 0
	}
	dl.Data = data
	if len(data) > room {
		dl.Data, dl.Size = data[:room], len(data)
	}
	payload, _ := json.Marshal(dl)
	return payload
}

// unpublishable makes a dead letter of an outbox entry that can never be stored (no
// stream for its subject, too large): it says why, and the partition goes on. A delta or
// hop batch is also replaced by an empty batch under its number, or its destination
// would wait at the gap and then give it up, and what follows with it.
func (s *Stage) unpublishable(e delivery.OutboxEntry, err error) []delivery.OutboxEntry {
	s.stats.Dead.Add(1)
	s.log.Error("an outbox message cannot be published: dead-lettered", "subject", e.Subject, "id", e.MsgID, "err", err)
	out := []delivery.OutboxEntry{{
		Subject: s.cfg.Subjects.DLQ("event", s.cfg.Partition),
		MsgID:   pipeline.DeadLetterMsgID("outbox", s.cfg.Partition, e.Seq, -1),
		Data:    s.deadLetterData(DeadLetter{Error: fmt.Sprintf("cannot publish %s: %v", e.MsgID, err), Subject: e.Subject, Index: -1}, e.Data),
	}}
	if data, ok := pipeline.EmptyBatch(e.MsgID); ok {
		out = append(out, delivery.OutboxEntry{Subject: e.Subject, MsgID: e.MsgID, Data: data})
	}
	return out
}

// partitionKeys returns, for each partition, an id that routes to it.
func partitionKeys(n int) []pipeline.ID {
	keys := make([]pipeline.ID, n)
	found := 0
	for id := pipeline.ID(1); found < n; id++ {
		if p := pipeline.PartitionOf(id, n); keys[p] == 0 {
			keys[p] = id
			found++
		}
	}
	return keys
}
