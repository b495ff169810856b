package checkpoint

import (
	"encoding/binary"
	"fmt"

	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/internal/arena"
	"github.com/tally-dev/tally/store/internal/keys"
)

// A counter partition's windowed counts (store/window) keep each id's record of changes
// by minute, and an id with a record keeps its counters with it, under one key:
// w|family|p|'v'|id → the counters (a uvarint length, then appendCounts' form) and the
// record (window.AppendRecord). It lies under the partition's meta key, so that
// cold.CounterKeys — a backup, a restore, a clear — carries it with the checkpoint that
// wrote it. A checkpoint thus writes one key for an id whose counters and windows
// changed, where it wrote two before layout 6 (cold.LayoutWindowedCounts): the counter
// key c|…|id of such an id is left as it was, stale, and read only when the id has no
// record — storedCounts and LoadCounters read the record's key first. When an id's
// record empties (Entry.Left), its counters go back to its counter key and the record's
// key is deleted.
//
// Up to layout 5 the record was kept alone, under w|…|'m'|id, and the counters under
// the counter key: MoveRecords moves such records to the form above.

const (
	nsWindowed  = 'v'
	nsRecordsV5 = 'm'
)

func windowedPrefix(family string, p int) keys.Key { return keys.Meta(family, p).U8(nsWindowed) }

func recordsV5Prefix(family string, p int) keys.Key { return keys.Meta(family, p).U8(nsRecordsV5) }

// appendWindowed appends the value of an id's key with a record: its counters, packed
// by appendCounts, then rec.
func appendWindowed(dst, packed, rec []byte) []byte {
	return append(append(binary.AppendUvarint(dst, uint64(len(packed))), packed...), rec...)
}

// windowedSize is the length of appendWindowed's value of packed counters of n bytes
// and rec.
func windowedSize(n int, rec []byte) int { return uvarintSize(uint64(n)) + n + len(rec) }

// splitWindowed returns the packed counters and the record of a value appendWindowed
// made.
func splitWindowed(v []byte) (counts, rec []byte, err error) {
	n, k := binary.Uvarint(v)
	if k <= 0 || n > uint64(len(v)-k) {
		return nil, nil, fmt.Errorf("%w: windowed counters of %d bytes", cold.ErrCorrupt, len(v))
	}
	return v[k : k+int(n)], v[k+int(n):], nil
}

// entryKeys are the key prefixes a checkpoint writes its entries under.
type entryKeys struct{ counters, windowed keys.Key }

func newEntryKeys(family string, p int) entryKeys {
	return entryKeys{counters: keys.Counters(family, p), windowed: windowedPrefix(family, p)}
}

// key makes prefix|id in a.
func key(a *arena.Arena, prefix keys.Key, id uint64) keys.Key {
	return append(keys.Key(a.Alloc(len(prefix)+8)), prefix...).U64(id)
}

// put writes e in txn, its keys and values made in a.
func (ks entryKeys) put(txn *cold.Txn, a *arena.Arena, e *Entry) error {
	if len(e.Rec) > 0 {
		packed := appendCounts(a.Alloc(countsSize(e.Counts)), e.Counts)
		return txn.Set(key(a, ks.windowed, e.ID), appendWindowed(a.Alloc(windowedSize(len(packed), e.Rec)), packed, e.Rec))
	}
	ck := key(a, ks.counters, e.ID)
	if e.Left {
		wk := key(a, ks.windowed, e.ID)
		if e.Counts == nil {
			// Not in RAM: the counters move from the record's key, when there is one.
			return moveBack(txn, a, ck, wk)
		}
		if err := txn.Delete(wk); err != nil {
			return err
		}
	}
	if zero(e.Counts) {
		return txn.Delete(ck)
	}
	return txn.Set(ck, appendCounts(a.Alloc(countsSize(e.Counts)), e.Counts))
}

// moveBack moves the counters stored under the record's key wk, if any, to the counter
// key ck, and deletes wk.
func moveBack(txn *cold.Txn, a *arena.Arena, ck, wk []byte) error {
	var packed []byte
	found, err := txn.Get(wk, func(v []byte) error {
		c, _, err := splitWindowed(v)
		packed = append(a.Alloc(len(c)), c...)
		return err
	})
	if err != nil || !found {
		return err
	}
	if err := txn.Delete(wk); err != nil {
		return err
	}
	for _, b := range packed {
		if b != 0 {
			return txn.Set(ck, packed)
		}
	}
	return txn.Delete(ck) // all zeros: appendCounts writes a zero as one 0 byte
}

// LoadWindows calls fn with every window record (family, p) stores; rec is only valid
// during the call.
func LoadWindows(db *cold.DB, family string, p int, fn func(id uint64, rec []byte) error) error {
	return db.View(func(txn *cold.Txn) error {
		prefix := windowedPrefix(family, p)
		return txn.Scan(prefix, nil, true, func(k, v []byte) (bool, error) {
			if len(k) != len(prefix)+8 {
				return false, fmt.Errorf("%w: window key of %d bytes", cold.ErrCorrupt, len(k))
			}
			id := keys.U64At(k, len(prefix))
			_, rec, err := splitWindowed(v)
			if err == nil {
				err = fn(id, rec)
			}
			if err != nil {
				return false, fmt.Errorf("window of %d in %s/%d: %w", id, family, p, err)
			}
			return true, nil
		})
	})
}

// moveBatch bounds the records MoveRecords moves in one transaction.
const moveBatch = 1024

// MoveRecords moves the window records of (family, p) that a tallyd of layout 5 or
// older stored alone (w|…|'m'|id, the counters under the counter key) to the form
// layout 6 reads, each with its counters, in transactions of at most moveBatch records.
// It returns how many it moved: none, after one look, when there are none. A crash
// halfway leaves the rest to the next call. A counter partition calls it before it
// loads its windows, so a database of an older layout, or a partition restored from an
// older backup, is read in this layout.
func MoveRecords(db *cold.DB, family string, p int) (int, error) {
	moved := 0
	old := recordsV5Prefix(family, p)
	for {
		var ids []uint64
		var recs [][]byte
		err := db.View(func(txn *cold.Txn) error {
			return txn.Scan(old, nil, true, func(k, v []byte) (bool, error) {
				if len(k) != len(old)+8 {
					return false, fmt.Errorf("%w: window key of %d bytes", cold.ErrCorrupt, len(k))
				}
				ids, recs = append(ids, keys.U64At(k, len(old))), append(recs, append([]byte(nil), v...))
				return len(ids) < moveBatch, nil
			})
		})
		if err != nil || len(ids) == 0 {
			return moved, err
		}
		ks := newEntryKeys(family, p)
		err = db.Update(func(txn *cold.Txn) error {
			for i, id := range ids {
				var v []byte
				if _, err := txn.Get(key(nil, ks.counters, id), func(packed []byte) error {
					v = appendWindowed(nil, packed, recs[i])
					return nil
				}); err != nil {
					return err
				}
				if v == nil { // counters of zero: no counter key
					v = appendWindowed(nil, nil, recs[i])
				}
				if err := txn.Set(key(nil, ks.windowed, id), v); err != nil {
					return err
				}
				if err := txn.Delete(key(nil, old, id)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return moved, fmt.Errorf("window records of %s/%d: %w", family, p, err)
		}
		moved += len(ids)
	}
}
