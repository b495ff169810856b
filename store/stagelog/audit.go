package stagelog

import (
	"fmt"

	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/internal/keys"
)

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
