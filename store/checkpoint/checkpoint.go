package checkpoint

import (
	"encoding/binary"
	"fmt"
	"math/bits"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/delivery"
	"github.com/tally-dev/tally/store/internal/arena"
	"github.com/tally-dev/tally/store/internal/keys"
)

// Checkpoint is the position a counter partition's stored counters reflect.
type Checkpoint struct {
	// Pos is the last stream sequence applied.
	Pos uint64 `msgpack:"pos"`
	// Marks are per source partition.
	Marks map[uint32]*delivery.Mark `msgpack:"marks"`
	// Seq numbers the checkpoints (SaveCounters increments it); JournalFrom is the oldest
	// journal entry kept (see SaveCounters).
	Seq         uint64 `msgpack:"n,omitempty"`
	JournalFrom uint64 `msgpack:"jf,omitempty"`
	// WindowTop is the newest minute of a window change applied (Unix minutes): the
	// windows keep the day up to it (store/window's floor), whatever the clock says.
	WindowTop uint32 `msgpack:"wt,omitempty"`
	// Snap and SnapSeq name the last snapshot of the hot table known durable when this
	// checkpoint was saved, by the random id it was written with and the checkpoint it
	// was taken at: the state those checkpoints lead to is the only one a snapshot file
	// may be loaded with. A number alone does not tie a file to a state: a restore
	// brings another process's checkpoints, numbered like this one's.
	Snap    uint64 `msgpack:"sn,omitempty"`
	SnapSeq uint64 `msgpack:"ss,omitempty"`
	// Writing and WritingSeq name the snapshot being written when this checkpoint was
	// saved, if one was: a process killed before the checkpoint that records it as
	// durable loads it all the same, when the file is there whole.
	Writing    uint64 `msgpack:"sw,omitempty"`
	WritingSeq uint64 `msgpack:"sws,omitempty"`
}

// Journal says what SaveCounters does with the partition's journal.
type Journal struct {
	// Append writes the checkpoint's entries, packed in one value, under its number as
	// well: a snapshot of the hot table taken at checkpoint s plus the journal after s
	// rebuild the table without reading every counter key.
	Append bool
	// DropThrough deletes the journal up to this checkpoint number (a durable snapshot
	// covers it).
	DropThrough uint64
	// Snap, when not zero, is the id of that snapshot, taken at checkpoint DropThrough:
	// the checkpoint records both (Checkpoint.Snap).
	Snap uint64
	// Writing and WritingSeq name the snapshot being written, if any
	// (Checkpoint.Writing).
	Writing, WritingSeq uint64
}

// Entry is one id's counters as a checkpoint writes them; all zeros, with no record,
// deletes them.
type Entry struct {
	ID     uint64
	Counts []uint64
	// Rec is the id's record of changes by minute (window.AppendRecord), when it has
	// one: the counters are stored with it (windows.go).
	Rec []byte
	// Left says the id may have had a record stored that it has no longer: the record's
	// key is deleted and the counters go back to the counter key. Counts nil then says
	// they are not in RAM: those stored with the record move back as they are.
	Left bool
}

// Changes is what a checkpoint writes to, and deletes from, its partition besides the
// counters: the outbox of its change events, the payloads of held delta batches.
type Changes struct {
	// Put are the change events announcing the checkpoint's entries; each Seq must be
	// unique in the partition's outbox and order the entries as they are to be sent.
	Put []delivery.OutboxEntry
	// Published are the Seqs of entries stored in the changes stream since.
	Published []uint64
	// Released are held delta batches applied since the last checkpoint: the marks of
	// this one no longer hold them, so their payloads are deleted with it.
	Released []delivery.HeldRef
}

// changePrefix holds the outbox of (family, p)'s change events. It lies under the
// partition's meta key, so that cold.CounterKeys — a backup, a restore, a clear —
// carries the outbox with the checkpoint that wrote it.
func changePrefix(family string, p int) keys.Key { return keys.Meta(family, p).U8(keys.NSOutbox) }
func changeKey(family string, p int, seq uint64) keys.Key {
	return changePrefix(family, p).U64(seq)
}

// SaveCounters writes entries and the checkpoint of (family, p) in one transaction, so
// the stored counters and the position they reflect never disagree, and keeps the
// journal as j says. It increments cp.Seq.
func SaveCounters(db *cold.DB, family string, p int, entries []Entry, cp *Checkpoint, j Journal) error {
	return SaveCheckpoint(db, family, p, entries, cp, j, Changes{})
}

// SaveCheckpoint is SaveCounters that also writes the change events announcing entries
// to the partition's outbox, and deletes those published, in the same transaction: a
// crash after the commit leaves them to be sent at the next start, never unannounced.
func SaveCheckpoint(db *cold.DB, family string, p int, entries []Entry, cp *Checkpoint, j Journal, ch Changes) error {
	txn := db.NewTxn(true)
	defer txn.Discard()
	if err := deleteChanges(txn, family, p, ch.Published); err != nil {
		return fmt.Errorf("checkpoint %s/%d: %w", family, p, err)
	}
	if err := deleteHeld(txn, family, p, ch.Released); err != nil {
		return fmt.Errorf("checkpoint %s/%d: %w", family, p, err)
	}
	for i := range ch.Put {
		if err := txn.PutSized(changeKey(family, p, ch.Put[i].Seq), &ch.Put[i], ch.Put[i].Size()); err != nil {
			return fmt.Errorf("checkpoint %s/%d: %w", family, p, err)
		}
	}
	next := *cp
	next.Seq++
	if j.Snap != 0 {
		next.Snap, next.SnapSeq = j.Snap, j.DropThrough
	}
	next.Writing, next.WritingSeq = j.Writing, j.WritingSeq
	if j.Append {
		if next.JournalFrom == 0 {
			next.JournalFrom = next.Seq
		}
		if err := txn.Set(keys.Journal(family, p).U64(next.Seq), packEntries(entries)); err != nil {
			return fmt.Errorf("checkpoint %s/%d: %w", family, p, err)
		}
	}
	if next.JournalFrom != 0 {
		for ; next.JournalFrom <= j.DropThrough && next.JournalFrom <= next.Seq; next.JournalFrom++ {
			if err := txn.Delete(keys.Journal(family, p).U64(next.JournalFrom)); err != nil {
				return fmt.Errorf("checkpoint %s/%d: %w", family, p, err)
			}
		}
	}
	v, err := msgpack.Marshal(&next)
	if err != nil {
		return err
	}
	// The keys and values of the counters and windows, which Badger holds until the
	// commit: a checkpoint writes thousands.
	var a arena.Arena
	ks := newEntryKeys(family, p)
	for i := range entries {
		if err := ks.put(txn, &a, &entries[i]); err != nil {
			return fmt.Errorf("checkpoint %s/%d: %w", family, p, err)
		}
	}
	if err := txn.Set(keys.Meta(family, p), v); err != nil {
		return err
	}
	if err := txn.Commit(); err != nil {
		return fmt.Errorf("checkpoint %s/%d: %w", family, p, err)
	}
	*cp = next
	return nil
}

// LoadChanges returns the outbox of (family, p)'s change events, in Seq order: those
// written by checkpoints and not yet known to be published.
func LoadChanges(db *cold.DB, family string, p int) ([]delivery.OutboxEntry, error) {
	var out []delivery.OutboxEntry
	err := db.View(func(txn *cold.Txn) error {
		prefix := changePrefix(family, p)
		it := txn.Iterator(cold.IteratorOptions{Prefix: prefix, PrefetchValues: true, PrefetchSize: 16})
		defer it.Close()
		for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
			k := it.Key()
			if len(k) != len(prefix)+8 {
				return fmt.Errorf("%w: change outbox key of %d bytes", cold.ErrCorrupt, len(k))
			}
			var e delivery.OutboxEntry
			if err := it.Value(func(v []byte) error { return msgpack.Unmarshal(v, &e) }); err != nil {
				return fmt.Errorf("%w: change outbox of %s/%d: %w", cold.ErrCorrupt, family, p, err)
			}
			e.Seq = keys.U64At(k, len(prefix))
			out = append(out, e)
		}
		return nil
	})
	return out, err
}

// DeleteChanges deletes published change events of (family, p) from its outbox, for a
// partition that stops with no checkpoint left to do it.
func DeleteChanges(db *cold.DB, family string, p int, seqs []uint64) error {
	if len(seqs) == 0 {
		return nil
	}
	err := db.Update(func(txn *cold.Txn) error { return deleteChanges(txn, family, p, seqs) })
	if err != nil {
		return fmt.Errorf("change outbox of %s/%d: %w", family, p, err)
	}
	return nil
}

// LoadJournal calls fn, oldest first, for every entry journaled by the checkpoints after
// number after, and returns the number of the last one (after if there is none). The
// journal must run without a gap from after+1: a gap is ErrCorrupt, since the caller
// would miss changes. counts is only valid during the call.
func LoadJournal(db *cold.DB, family string, p, fields int, after uint64, fn func(id uint64, counts []uint64)) (uint64, error) {
	last := after
	counts := make([]uint64, fields)
	err := db.View(func(txn *cold.Txn) error {
		prefix := keys.Journal(family, p)
		it := txn.Iterator(cold.IteratorOptions{Prefix: prefix, PrefetchValues: true, PrefetchSize: 16})
		defer it.Close()
		for it.Seek(prefix.U64(after + 1)); it.ValidForPrefix(prefix); it.Next() {
			k := it.Key()
			if len(k) != len(prefix)+8 {
				return fmt.Errorf("%w: journal key of %d bytes", cold.ErrCorrupt, len(k))
			}
			if n := keys.U64At(k, len(prefix)); n != last+1 {
				return fmt.Errorf("%w: journal of %s/%d jumps from checkpoint %d to %d", cold.ErrCorrupt, family, p, last, n)
			}
			last++
			if err := it.Value(func(v []byte) error { return unpackEntries(v, counts, fn) }); err != nil {
				return fmt.Errorf("%w: journal of %s/%d at %d: %w", cold.ErrCorrupt, family, p, last, err)
			}
		}
		return nil
	})
	return last, err
}

// Counts reads the stored counters of ids of (family, p) in one read transaction:
// out[i] gets those of ids[i], all zeros for an id that has none.
func Counts(db *cold.DB, family string, p int, ids []uint64, out [][]uint64) error {
	return NewStored(family, p).Counts(db, ids, out, nil)
}

// Stored reads the stored counters of one partition, the prefixes of its keys made
// once: a counter partition reads the ids that warm up one at a time. Its use is not
// safe for concurrent use.
type Stored struct {
	family string
	p      int
	ks     entryKeys
	kb     []byte // a read-only transaction keeps no key it is asked for
}

// NewStored returns the reader of (family, p)'s stored counters.
func NewStored(family string, p int) *Stored {
	return &Stored{family: family, p: p, ks: newEntryKeys(family, p), kb: make([]byte, 0, 64)}
}

// Counts is the package's Counts for a caller that knows which ids may have a window
// record stored (recorded; nil: any of them): the others are read from their counter
// key alone, one lookup where an id with no record takes two (windows.go).
func (s *Stored) Counts(db *cold.DB, ids []uint64, out [][]uint64, recorded func(id uint64) bool) error {
	return db.View(func(txn *cold.Txn) error {
		for i, id := range ids {
			if err := s.ks.stored(txn, s.kb, id, recorded == nil || recorded(id), out[i]); err != nil {
				return fmt.Errorf("cold counters of %d in %s/%d: %w", id, s.family, s.p, err)
			}
		}
		return nil
	})
}

// packEntries packs a checkpoint's entries: per entry the id (8 bytes BE), the number
// of counters and the counters, all uvarints. Those whose counters are not in RAM
// (Entry.Left) are left out: the table the journal rebuilds holds none of them.
func packEntries(entries []Entry) []byte {
	b := make([]byte, 0, 12*len(entries))
	for _, e := range entries {
		if e.Counts == nil {
			continue
		}
		b = binary.BigEndian.AppendUint64(b, e.ID)
		b = binary.AppendUvarint(b, uint64(len(e.Counts)))
		for _, v := range e.Counts {
			b = binary.AppendUvarint(b, v)
		}
	}
	return b
}

func unpackEntries(b []byte, counts []uint64, fn func(id uint64, counts []uint64)) error {
	for len(b) > 0 {
		if len(b) < 9 {
			return fmt.Errorf("truncated entry")
		}
		id := binary.BigEndian.Uint64(b)
		n, k := binary.Uvarint(b[8:])
		if k <= 0 || n != uint64(len(counts)) {
			return fmt.Errorf("entry of %d counters, want %d", n, len(counts))
		}
		b = b[8+k:]
		for f := range counts {
			v, k := binary.Uvarint(b)
			if k <= 0 {
				return fmt.Errorf("truncated counters")
			}
			counts[f], b = v, b[k:]
		}
		fn(id, counts)
	}
	return nil
}

// LoadCheckpoint returns the last checkpoint of (family, p), empty if there is none.
func LoadCheckpoint(db *cold.DB, family string, p int) (Checkpoint, error) {
	cp := Checkpoint{Marks: map[uint32]*delivery.Mark{}}
	err := db.View(func(txn *cold.Txn) error {
		found, err := txn.GetValue(keys.Meta(family, p), &cp, fmt.Sprintf("checkpoint %s/%d", family, p))
		if !found || err != nil {
			return err
		}
		if cp.Marks == nil {
			cp.Marks = map[uint32]*delivery.Mark{}
		}
		return nil
	})
	return cp, err
}

// LoadCounters calls fn for every stored id of (family, p); for an id with a record, a
// second time with the counters stored with it, which are the id's (windows.go).
// counts is only valid during the call.
func LoadCounters(db *cold.DB, family string, p, fields int, fn func(id uint64, counts []uint64)) error {
	counts := make([]uint64, fields)
	return db.View(func(txn *cold.Txn) error {
		for i, prefix := range []keys.Key{keys.Counters(family, p), windowedPrefix(family, p)} {
			windowed := i == 1
			err := txn.Scan(prefix, nil, true, func(k, v []byte) (bool, error) {
				if len(k) != len(prefix)+8 {
					return false, fmt.Errorf("%w: counter key of %d bytes", cold.ErrCorrupt, len(k))
				}
				var err error
				if windowed {
					v, _, err = splitWindowed(v)
				}
				if err == nil {
					err = unpackCounts(v, counts)
				}
				if err != nil {
					return false, fmt.Errorf("%w: counters of %s/%d: %w", cold.ErrCorrupt, family, p, err)
				}
				fn(keys.U64At(k, len(prefix)), counts)
				return true, nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// appendCounts appends counters as uvarints: small counts, the common case, take a byte.
func appendCounts(b []byte, c []uint64) []byte {
	for _, v := range c {
		b = binary.AppendUvarint(b, v)
	}
	return b
}

// countsSize is the length of appendCounts' encoding of c.
func countsSize(c []uint64) int {
	n := 0
	for _, v := range c {
		n += uvarintSize(v)
	}
	return n
}

// uvarintSize is the length of v as a uvarint.
func uvarintSize(v uint64) int { return max(bits.Len64(v)+6, 7) / 7 }

func unpackCounts(b []byte, dst []uint64) error {
	clear(dst)
	for i := 0; len(b) > 0; i++ {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return fmt.Errorf("bad packed counters")
		}
		if i >= len(dst) {
			// A family's fields may only be added: one that is gone (post's viewers,
			// counted with --viewers and then not) would be read into the wrong field.
			return fmt.Errorf("more counters stored than the family's %d fields: a field was taken out of the family (was tallyd started without --viewers after counting viewers?)", len(dst))
		}
		dst[i], b = v, b[n:]
	}
	return nil
}

func zero(c []uint64) bool {
	for _, v := range c {
		if v != 0 {
			return false
		}
	}
	return true
}

// deleteChanges removes published change events of family/p from the outbox in txn.
func deleteChanges(txn *cold.Txn, family string, p int, seqs []uint64) error {
	for _, s := range seqs {
		if err := txn.Delete(changeKey(family, p, s)); err != nil {
			return err
		}
	}
	return nil
}

// stored reads the checkpointed counters of one id into dst (all zeros if none): those
// stored with its record when it may have one (recorded) and has, else its counter
// key's (windows.go); its keys are made in kb. It lags the counter worker's RAM by at
// most one flush.
func (ks entryKeys) stored(txn *cold.Txn, kb []byte, id uint64, recorded bool, dst []uint64) error {
	clear(dst)
	if recorded {
		found, err := txn.Get(binary.BigEndian.AppendUint64(append(kb, ks.windowed...), id), func(v []byte) error {
			c, _, err := splitWindowed(v)
			if err != nil {
				return err
			}
			return unpackCounts(c, dst)
		})
		if found || err != nil {
			return err
		}
	}
	_, err := txn.Get(binary.BigEndian.AppendUint64(append(kb, ks.counters...), id), func(v []byte) error { return unpackCounts(v, dst) })
	return err
}
