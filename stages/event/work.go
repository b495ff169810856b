package event

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/dgraph-io/badger/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/stages/hop"
	"github.com/tally-dev/tally/store/cold"
)

// maxDeltas is the most deltas in one delta batch: a transaction's deltas for one
// counter partition are cut into batches this size, each well under NATS's payload.
const maxDeltas = 8192

// maxHopEvents is the most events in one hop batch (before halving by size).
const maxHopEvents = 2000

// work is what one transaction attempt makes besides its Badger writes; it is thrown
// away with the transaction when that does not fit, so nothing of the stage's state is
// touched before the commit.
type work struct {
	s        *Stage
	c        *coalescer
	in       hop.In                   // a copy of the state's hop marks
	fwd      map[int][]pipeline.Event // events for other partitions
	fwdOrder []int
	likes    *cold.Likes // the transaction's likes, written at its end
	dlq      []cold.OutboxEntry
	deadSeqs []uint64 // messages to dead-letter whole
	dead     []uint64 // those dead-lettered so far

	hop                     bool  // applying events of a hop batch: handed over from another partition
	dups, forwarded, deltas int64 // counted once the transaction commits
	deleted                 int   // acknowledged outbox entries the transaction deletes
}

func (s *Stage) newWork(c *coalescer, dead []uint64) *work {
	c.reset()
	marks := make(map[uint32]*cold.Mark, len(s.st.Hops))
	for src, m := range s.st.Hops {
		marks[src] = &cold.Mark{Through: m.Through, Held: slices.Clone(m.Held)}
	}
	return &work{s: s, c: c, in: hop.In{Marks: marks, Log: s.log, Stats: &hop.InStats{}}, fwd: map[int][]pipeline.Event{}, deadSeqs: dead, likes: cold.NewLikes(s.cfg.Partition, s.heavy)}
}

func (w *work) forward(q int, e *pipeline.Event) {
	if w.fwd[q] == nil {
		w.fwdOrder = append(w.fwdOrder, q)
	}
	w.fwd[q] = append(w.fwd[q], *e)
	w.forwarded++
}

// next returns the state after the transaction, ending at stream position pos, and its
// outbox: dead letters, hop batches to other partitions, delta batches, each numbered
// on without gaps per destination.
func (s *Stage) next(pos uint64, w *work) (cold.StageState, []cold.OutboxEntry, error) {
	p := s.cfg.Partition
	st := s.st // maps are copied below, never written in place
	st.Pos = pos
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
		var err error
		if outbox, err = s.hopEntries(outbox, &st, q, w.fwd[q]); err != nil {
			return st, nil, err
		}
	}
	for _, d := range w.c.order {
		key := d.String()
		deltas := w.c.byDest[d].deltas
		for len(deltas) > 0 {
			k := min(len(deltas), maxDeltas)
			st.Seqs[key]++
			b := pipeline.DeltaBatch{Source: uint32(p), Seq: st.Seqs[key], Deltas: deltas[:k]}
			outbox = append(outbox, cold.OutboxEntry{
				Subject: s.cfg.Subjects.Delta(d.family, d.partition),
				MsgID:   pipeline.DeltaMsgID(p, key, b.Seq),
				Data:    pipeline.AppendDeltaBatch(nil, &b),
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

// hopEntries appends the hop batches carrying evs to partition q, each numbered next
// and small enough for NATS.
func (s *Stage) hopEntries(outbox []cold.OutboxEntry, st *cold.StageState, q int, evs []pipeline.Event) ([]cold.OutboxEntry, error) {
	p := s.cfg.Partition
	for len(evs) > 0 {
		k := min(len(evs), maxHopEvents)
		for {
			b := pipeline.HopBatch{Source: uint32(p), Seq: st.HopSeqs[uint32(q)] + 1, Events: evs[:k]}
			data, err := pipeline.Marshal(&b, false)
			if err != nil {
				return nil, err
			}
			if len(data) > s.cfg.MaxPayload/2 && k > 1 {
				k /= 2
				continue
			}
			st.HopSeqs[uint32(q)] = b.Seq
			outbox = append(outbox, cold.OutboxEntry{
				Subject: s.cfg.Subjects.Event(pipeline.TypeHop, s.keys[q]),
				MsgID:   pipeline.HopMsgID(p, q, b.Seq),
				Data:    data,
			})
			break
		}
		evs = evs[k:]
	}
	return outbox, nil
}

// applyHop applies a hop batch of another partition: in its source's order, exactly
// once, held when it comes above a gap.
func (s *Stage) applyHop(txn *badger.Txn, m jetstream.Msg, seq uint64, w *work) error {
	b, err := pipeline.DecodeHopBatch(m.Data(), s.cfg.Families)
	if err == nil && (int(b.Source) >= s.cfg.Partitions || int(b.Source) == s.cfg.Partition) {
		err = fmt.Errorf("%w: hop batch from partition %d", pipeline.ErrBadEvent, b.Source)
	}
	if err != nil {
		w.deadLetter(m, seq, -1, m.Data(), err)
		return nil
	}
	ready, dup := w.in.Accept(b.Source, b.Seq, m.Data())
	if dup {
		w.dups++
		return nil
	}
	for _, data := range ready {
		if b, err = pipeline.DecodeHopBatch(data, s.cfg.Families); err != nil {
			return err // it decoded when it was held
		}
		w.hop = true
		for i := range b.Events {
			if e := &b.Events[i]; e.Seq == 0 {
				// Sent by code that did not place events: placed where it is applied.
				e.Seq = pipeline.SeqOf(seq, i)
			}
			if err := s.applyEvent(txn, &b.Events[i], true, w); err != nil {
				w.hop = false
				return fmt.Errorf("cannot apply %s event of hop batch %d.%d: %w", b.Events[i].Type, b.Source, b.Seq, err)
			}
		}
		w.hop = false
	}
	return nil
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
	s.stats.Dead.Add(1)
	w.dlq = append(w.dlq, cold.OutboxEntry{
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
	if room < 0 {
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
// stream for its subject, too large): it says why, and the partition goes on.
func (s *Stage) unpublishable(e cold.OutboxEntry, err error) *cold.OutboxEntry {
	s.stats.Dead.Add(1)
	s.log.Error("an outbox message cannot be published: dead-lettered", "subject", e.Subject, "id", e.MsgID, "err", err)
	return &cold.OutboxEntry{
		Subject: s.cfg.Subjects.DLQ("event", s.cfg.Partition),
		MsgID:   pipeline.DeadLetterMsgID("outbox", s.cfg.Partition, e.Seq, -1),
		Data:    s.deadLetterData(DeadLetter{Error: fmt.Sprintf("cannot publish %s: %v", e.MsgID, err), Subject: e.Subject, Index: -1}, e.Data),
	}
}
