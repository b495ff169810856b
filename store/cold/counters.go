package cold

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"
	"github.com/vmihailenco/msgpack/v5"
)

// Mark is what a counter partition has applied from one source: every batch sequence up
// to Through, and the listed ones above it (batches can arrive out of order after a
// publish is retried).
type Mark struct {
	Through uint64   `msgpack:"t"`
	Above   []uint64 `msgpack:"a,omitempty"`
}

// Checkpoint is the position a counter partition's stored counters reflect.
type Checkpoint struct {
	// Pos is the last stream sequence applied.
	Pos uint64 `msgpack:"pos"`
	// Marks are per source partition.
	Marks map[uint32]*Mark `msgpack:"marks"`
}

// Entry is one id's counters; all zeros deletes it.
type Entry struct {
	ID     uint64
	Counts []uint64
}

func counterPrefix(family string, p int) key {
	return newKey(nsCounter, 4+len(family)).str(family).u16(p)
}
func metaKey(family string, p int) key { return newKey(nsMeta, 4+len(family)).str(family).u16(p) }

// SaveCounters writes entries and the checkpoint of (family, p) in one transaction, so
// the stored counters and the position they reflect never disagree.
func SaveCounters(db *DB, family string, p int, entries []Entry, cp *Checkpoint) error {
	v, err := msgpack.Marshal(cp)
	if err != nil {
		return err
	}
	prefix := counterPrefix(family, p)
	txn := db.db.NewTransaction(true)
	defer txn.Discard()
	for _, e := range entries {
		k := append(append(key{}, prefix...), 0, 0, 0, 0, 0, 0, 0, 0)
		binary.BigEndian.PutUint64(k[len(prefix):], e.ID)
		if zero(e.Counts) {
			err = txn.Delete(k)
		} else {
			err = txn.Set(k, packCounts(e.Counts))
		}
		if err != nil {
			return fmt.Errorf("checkpoint %s/%d: %w", family, p, err)
		}
	}
	if err := txn.Set(metaKey(family, p), v); err != nil {
		return err
	}
	if err := txn.Commit(); err != nil {
		return fmt.Errorf("checkpoint %s/%d: %w", family, p, err)
	}
	return nil
}

// LoadCounters calls fn for every stored id of (family, p) and returns the checkpoint.
// counts is only valid during the call.
func LoadCounters(db *DB, family string, p, fields int, fn func(id uint64, counts []uint64)) (Checkpoint, error) {
	cp := Checkpoint{Marks: map[uint32]*Mark{}}
	counts := make([]uint64, fields)
	err := db.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(metaKey(family, p))
		switch {
		case errors.Is(err, badger.ErrKeyNotFound):
		case err != nil:
			return err
		default:
			if err := item.Value(func(v []byte) error { return msgpack.Unmarshal(v, &cp) }); err != nil {
				return fmt.Errorf("%w: checkpoint %s/%d: %w", ErrCorrupt, family, p, err)
			}
			if cp.Marks == nil {
				cp.Marks = map[uint32]*Mark{}
			}
		}
		prefix := counterPrefix(family, p)
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true, PrefetchSize: 256})
		defer it.Close()
		for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
			k := it.Item().Key()
			if len(k) != len(prefix)+8 {
				return fmt.Errorf("%w: counter key of %d bytes", ErrCorrupt, len(k))
			}
			if err := it.Item().Value(func(v []byte) error { return unpackCounts(v, counts) }); err != nil {
				return fmt.Errorf("%w: counters of %s/%d: %w", ErrCorrupt, family, p, err)
			}
			fn(binary.BigEndian.Uint64(k[len(prefix):]), counts)
		}
		return nil
	})
	return cp, err
}

// packCounts stores counters as uvarints: small counts, the common case, take a byte.
func packCounts(c []uint64) []byte {
	b := make([]byte, 0, len(c)*2)
	for _, v := range c {
		b = binary.AppendUvarint(b, v)
	}
	return b
}

func unpackCounts(b []byte, dst []uint64) error {
	clear(dst)
	for i := 0; len(b) > 0; i++ {
		v, n := binary.Uvarint(b)
		if n <= 0 || i >= len(dst) {
			return fmt.Errorf("bad packed counters")
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
