package cold

import (
	"fmt"

	"github.com/tally-dev/tally/store/internal/keys"
)

// StageState, PutStage and LoadStage write and read an event stage's state as
// store/stagelog does (its MessagePack names), for the upgrade tests, which cannot import
// it from inside store/cold.
type StageState struct {
	Pos uint64 `msgpack:"pos"`
	Log uint64 `msgpack:"log,omitempty"`
}

func PutStage(txn *Txn, p int, st *StageState) error { return txn.PutValue(keys.Stage(p), st) }

func LoadStage(db *DB, p int) (st StageState, _ []byte, err error) {
	err = db.View(func(txn *Txn) error {
		_, err := txn.GetValue(keys.Stage(p), &st, fmt.Sprintf("stage %d state", p))
		return err
	})
	return st, nil, err
}
