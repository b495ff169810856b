package checkpoint

import (
	"fmt"

	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/internal/arena"
	"github.com/tally-dev/tally/store/internal/keys"
)

// A counter partition's windowed counts (store/window) keep each id's record of changes
// by minute under w|family|p|'m'|id: under the partition's meta key, so that
// cold.CounterKeys — a backup, a restore, a clear — carries them with the checkpoint
// that wrote them. A checkpoint writes the records of the ids whose windows changed
// since the one before, in its transaction (Changes.Windows); an empty record deletes
// the key.

const nsWindow = 'm'

func windowPrefix(family string, p int) keys.Key { return keys.Meta(family, p).U8(nsWindow) }

// WindowEntry is one id's record of changes by minute (window.AppendRecord); empty
// deletes it.
type WindowEntry struct {
	ID  uint64
	Rec []byte
}

func putWindows(txn *cold.Txn, a *arena.Arena, family string, p int, entries []WindowEntry) error {
	prefix := windowPrefix(family, p)
	for _, e := range entries {
		k := append(keys.Key(a.Alloc(len(prefix)+8)), prefix...).U64(e.ID)
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
func LoadWindows(db *cold.DB, family string, p int, fn func(id uint64, rec []byte) error) error {
	return db.View(func(txn *cold.Txn) error {
		prefix := windowPrefix(family, p)
		return txn.Scan(prefix, nil, true, func(k, v []byte) (bool, error) {
			if len(k) != len(prefix)+8 {
				return false, fmt.Errorf("%w: window key of %d bytes", cold.ErrCorrupt, len(k))
			}
			id := keys.U64At(k, len(prefix))
			if err := fn(id, v); err != nil {
				return false, fmt.Errorf("window of %d in %s/%d: %w", id, family, p, err)
			}
			return true, nil
		})
	})
}
