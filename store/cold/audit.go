package cold

import (
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"
	"github.com/vmihailenco/msgpack/v5"
)

// StageOutbox tells how far event-stage partition p's outbox is published, for an audit
// that must know when what the stage had committed is in the streams: last is the
// sequence of the last entry written, oldest that of the oldest entry not yet known to
// be acknowledged (0 when none). Every entry below oldest was stored. It reads the
// state and one key, not the outbox's messages.
func StageOutbox(db *DB, p int) (last, oldest uint64, err error) {
	err = db.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(stageKey(p))
		switch {
		case errors.Is(err, badger.ErrKeyNotFound):
		case err != nil:
			return err
		default:
			var st struct {
				Outbox uint64 `msgpack:"outbox"` // StageState.Outbox, the rest not decoded
			}
			if err := item.Value(func(v []byte) error { return msgpack.Unmarshal(v, &st) }); err != nil {
				return fmt.Errorf("%w: stage %d state: %w", ErrCorrupt, p, err)
			}
			last = st.Outbox
		}
		prefix := newKey(nsOutbox, 3).u16(p)
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		if it.Seek(prefix); it.ValidForPrefix(prefix) {
			oldest = u64at(it.Item().Key(), 3)
		}
		return nil
	})
	return last, oldest, err
}
