package stagelog

import (
	"fmt"

	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/internal/keys"
)

// Outbox tells how far event-stage partition p's outbox is published, for an audit
// that must know when what the stage had committed is in the streams: last is the
// sequence of the last entry written, oldest that of the oldest entry not yet known to
// be acknowledged (0 when none). Every entry below oldest was stored. It reads the
// state and one key, not the outbox's messages.
func Outbox(db *cold.DB, p int) (last, oldest uint64, err error) {
	err = db.View(func(txn *cold.Txn) error {
		var st struct {
			Outbox uint64 `msgpack:"outbox"` // State.Outbox, the rest not decoded
		}
		if _, err := txn.GetValue(keys.Stage(p), &st, fmt.Sprintf("stage %d state", p)); err != nil {
			return err
		}
		last = st.Outbox
		prefix := keys.Outbox(p)
		it := txn.Iterator(cold.IteratorOptions{Prefix: prefix})
		defer it.Close()
		if it.Seek(prefix); it.ValidForPrefix(prefix) {
			oldest = keys.U64At(it.Key(), 3)
		}
		return nil
	})
	return last, oldest, err
}

// Hops tells where event-stage partition p stands with the hop batches between
// partitions, for an audit that must know when what one partition handed to another is
// applied there: sent is the last hop batch sequence it sent to each other partition
// (State.HopSeqs), applied the last one it has applied, with every one before, of
// each other partition (State.Hops' Through; a batch held above a gap is not). It
// decodes neither the held batches' payloads nor the rest of the state.
func Hops(db *cold.DB, p int) (sent, applied map[uint32]uint64, err error) {
	var st struct { // State's hop fields, by the same names
		HopSeqs map[uint32]uint64 `msgpack:"hop_seqs"`
		Hops    map[uint32]struct {
			Through uint64 `msgpack:"t"`
		} `msgpack:"hops"`
	}
	err = db.View(func(txn *cold.Txn) error {
		_, err := txn.GetValue(keys.Stage(p), &st, fmt.Sprintf("stage %d state", p))
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	applied = make(map[uint32]uint64, len(st.Hops))
	for src, m := range st.Hops {
		applied[src] = m.Through
	}
	return st.HopSeqs, applied, nil
}
