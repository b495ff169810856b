package stagelog

import (
	"fmt"
	"slices"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/delivery"
	"github.com/tally-dev/tally/store/internal/keys"
)

// State is what an event-stage partition commits with every transaction: the last
// stream sequence it consumed and the next sequence of each outbox destination.
type State struct {
	Pos uint64 `msgpack:"pos"`
	// Seqs maps a delta destination ("family.partition") to the last batch sequence sent.
	Seqs map[string]uint64 `msgpack:"seqs"`
	// Outbox is the sequence of the last outbox entry written.
	Outbox uint64 `msgpack:"outbox"`
	// Log is the sequence, in the log stream, of the record of the last transaction
	// (0 when the stage does not log, or has logged nothing yet). A transaction commits
	// the sequence of the record before its own, which it knows before it appends:
	// whoever loads the state takes the next record as its own when that record ends at
	// Pos (see stages/event's replay).
	Log uint64 `msgpack:"log,omitempty"`
	// N counts the partition's transactions: a transaction that only releases held hop
	// batches (it consumes no message) ends at the position of the one before, and N
	// tells their log records apart.
	N uint64 `msgpack:"n,omitempty"`
	// HopSeqs is the last sequence of the hop batches sent to each other event partition.
	HopSeqs map[uint32]uint64 `msgpack:"hop_seqs,omitempty"`
	// Hops is what the partition has applied of each other partition's hop batches, and
	// what it holds above a gap.
	Hops map[uint32]*delivery.Mark `msgpack:"hops,omitempty"`
	// Unsent, when not 0, says that the outbox entries from Unsent on are kept in the
	// partition's log, not in Badger (layout 5, a stage that logs): every entry below it
	// was stored, and those from it on may not have been. UnsentLog is the log record to
	// read them from: the record holding entry Unsent or one before it (0: the log's
	// first). 0 when the entries are in Badger: a stage that does not log, or a record
	// of a version before.
	Unsent    uint64 `msgpack:"unsent,omitempty"`
	UnsentLog uint64 `msgpack:"unsent_log,omitempty"`
}

// LogKept is the oldest log record a stage loading st reads: its own (Log, or the one
// after it) and, when its outbox is in the log, the one holding its oldest entry that
// may be unsent. A log purged below it loses nothing the state needs.
func (st *State) LogKept() uint64 {
	if st.Unsent != 0 {
		return min(st.Log, st.UnsentLog)
	}
	return st.Log
}

// Record is one transaction of an event stage as it is logged to NATS before it
// commits: the position it started from, the state it committed and the outbox it wrote.
// Replaying the records after a state applies the same events with the same cuts and
// sends the same outbox, so a new owner continues exactly where the last one stopped.
type Record struct {
	Prev   uint64                 `msgpack:"prev"`
	State  State                  `msgpack:"state"`
	Outbox []delivery.OutboxEntry `msgpack:"outbox"`
	// Dead lists the stream sequences of messages dead-lettered whole because applying
	// them would not fit in one transaction: a replay does not try them again.
	Dead []uint64 `msgpack:"dead,omitempty"`
	// DeadHops lists the held hop batches the transaction released and dead-lettered
	// (one that does not fit in a transaction alone): a replay does not apply them.
	DeadHops []delivery.HeldRef `msgpack:"dead_hops,omitempty"`
	// Acked lists the outbox entries of earlier transactions acknowledged since the
	// transaction before (those Badger held are deleted by this one): a standby that
	// follows the log and keeps them in Badger — a version before the outbox was kept in
	// the log, or a state of one — deletes them too, so that its outbox is the owner's
	// and a takeover re-sends only what may be unsent.
	Acked []uint64 `msgpack:"acked,omitempty"`
	// Writes, when present, is everything the transaction wrote in Badger, its state
	// with the record before named (State.Log) included (cold.Txn.AppendWrites, as an
	// S2 block: github.com/klauspost/compress/s2): a
	// standby applies them, then the state naming this record, rather than executing
	// the record's events again. Absent when the stage's records carry none
	// (stages/event's Config.LogWrites), when they did not fit in the record, and in
	// records written before records carried them (a tallyd of a version before reads
	// a record with them, skipping the field, as one without): a standby then executes
	// the record's events.
	Writes []byte `msgpack:"writes,omitempty"`
}

// EncodeRecord and DecodeRecord convert a record to and from its log message.
func EncodeRecord(r *Record) ([]byte, error) { return cold.Marshal(r, r.size()) }

// size is about the bytes r takes encoded, at least those of its messages and writes,
// which are most of it.
func (r *Record) size() int {
	n := 256 + len(r.Writes) + 9*(len(r.Dead)+len(r.Acked)) + 16*len(r.DeadHops) +
		24*(len(r.State.Seqs)+len(r.State.HopSeqs)+len(r.State.Hops))
	for i := range r.Outbox {
		n += r.Outbox[i].Size()
	}
	return n
}

func DecodeRecord(data []byte) (*Record, error) {
	var r Record
	if err := msgpack.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("%w: log record: %w", cold.ErrCorrupt, err)
	}
	if r.State.Seqs == nil {
		r.State.Seqs = map[string]uint64{}
	}
	return &r, nil
}

func outboxKey(p int, seq uint64) keys.Key { return keys.New(keys.NSOutbox, 11).U16(p).U64(seq) }

// Load returns partition p's state and its unpublished outbox, oldest first.
func Load(db *cold.DB, p int) (State, []delivery.OutboxEntry, error) {
	st := State{Seqs: map[string]uint64{}}
	var out []delivery.OutboxEntry
	err := db.View(func(txn *cold.Txn) error {
		if _, err := txn.GetValue(keys.Stage(p), &st, fmt.Sprintf("stage %d state", p)); err != nil {
			return err
		}
		if st.Seqs == nil {
			st.Seqs = map[string]uint64{}
		}
		prefix := keys.Outbox(p)
		it := txn.Iterator(cold.IteratorOptions{Prefix: prefix, PrefetchValues: true})
		defer it.Close()
		for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
			var e delivery.OutboxEntry
			if err := it.Value(func(v []byte) error { return msgpack.Unmarshal(v, &e) }); err != nil {
				return fmt.Errorf("%w: stage %d outbox: %w", cold.ErrCorrupt, p, err)
			}
			e.Seq = keys.U64At(it.Key(), 3)
			out = append(out, e)
		}
		return nil
	})
	return st, out, err
}

// Put writes partition p's state in txn.
func Put(txn *cold.Txn, p int, st *State) error {
	return txn.PutValue(keys.Stage(p), st)
}

// PutOutbox writes an outbox entry in txn; e.Seq must be the state's new Outbox value.
func PutOutbox(txn *cold.Txn, p int, e *delivery.OutboxEntry) error {
	return txn.PutSized(outboxKey(p, e.Seq), e, e.Size())
}

// DeleteOutbox removes the published entries of partition p in txn that Badger may
// hold, those up to through: the later ones were never written there (State.Unsent).
func DeleteOutbox(txn *cold.Txn, p int, seqs []uint64, through uint64) error {
	for _, s := range seqs {
		if s > through {
			continue
		}
		if err := txn.Delete(outboxKey(p, s)); err != nil {
			return err
		}
	}
	return nil
}

// Hop batches an event partition holds above a gap (stages/hop) keep their payloads
// under the partition's stage key, p|partition|'h'|src|seq, so that cold.EventKeys — a
// backup, a restore, a clear — carries them with the state whose marks hold them. They are
// written and deleted in the stage's own transactions, with the marks.
func heldKey(p int, src uint32, seq uint64) keys.Key {
	return keys.Stage(p).U8(keys.NSHeld).U32(src).U64(seq)
}

// PutHeld stores the payload of hop batch seq of src that partition p holds.
func PutHeld(txn *cold.Txn, p int, src uint32, seq uint64, data []byte) error {
	return txn.Set(heldKey(p, src, seq), slices.Clone(data))
}

// GetHeld reads it back; a missing one is cold.ErrCorrupt.
func GetHeld(txn *cold.Txn, p int, src uint32, seq uint64) ([]byte, error) {
	data, err := delivery.Payload(txn, heldKey(p, src, seq))
	if err != nil {
		return nil, fmt.Errorf("hop batch %d of partition %d held by partition %d: %w", seq, src, p, err)
	}
	return data, nil
}

// DeleteHeld deletes it once the batch is applied.
func DeleteHeld(txn *cold.Txn, p int, src uint32, seq uint64) error {
	return txn.Delete(heldKey(p, src, seq))
}
