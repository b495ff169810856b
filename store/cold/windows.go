package cold

import (
	"fmt"

	"github.com/dgraph-io/badger/v4"
)

// A counter partition's windowed counts (store/window) keep each id's record of changes
// by minute under w|family|p|'m'|id: under the partition's meta key, so that
// CounterPart — a backup, a restore, a clear — carries them with the checkpoint that
// wrote them. A checkpoint writes the records of the ids whose windows changed since the
// one before, in its transaction (Changes.Windows); an empty record deletes the key.

const nsWindow = 'm'

func windowPrefix(family string, p int) key { return metaKey(family, p).U8(nsWindow) }

// WindowEntry is one id's record of changes by minute (window.AppendRecord); empty
// deletes it.
type WindowEntry struct {
	ID  uint64
	Rec []byte
}

func putWindows(txn *Txn, family string, p int, entries []WindowEntry) error {
	prefix := windowPrefix(family, p)
	for _, e := range entries {
		k := append(key{}, prefix...).U64(e.ID)
		var err error
		if len(e.Rec) == 0 {
			err = txn.Delete(k)
		} else {
			err = txn.Set(k, e.Rec)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// LoadWindows calls fn with every window record (family, p) stores; rec is only valid
// during the call.
func LoadWindows(db *DB, family string, p int, fn func(id uint64, rec []byte) error) error {
	return db.View(func(txn *Txn) error {
		prefix := windowPrefix(family, p)
		it := txn.iterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true, PrefetchSize: 256})
		defer it.Close()
		for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
			k := it.Item().Key()
			if len(k) != len(prefix)+8 {
				return fmt.Errorf("%w: window key of %d bytes", ErrCorrupt, len(k))
			}
			id := u64at(k, len(prefix))
			if err := it.Item().Value(func(v []byte) error { return fn(id, v) }); err != nil {
				return fmt.Errorf("window of %d in %s/%d: %w", id, family, p, err)
			}
		}
		return nil
	})
}
