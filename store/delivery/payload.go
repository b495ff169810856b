package delivery

import (
	"fmt"

	"github.com/tally-dev/tally/store/cold"
)

// Payload reads the payload of a held batch at k, of a counter partition or an event
// stage; a missing one is cold.ErrCorrupt: the marks that hold it were written with or
// after it.
func Payload(txn *cold.Txn, k []byte) ([]byte, error) {
	var data []byte
	found, err := txn.Get(k, func(v []byte) error { data = append([]byte(nil), v...); return nil })
	if err == nil && !found {
		return nil, fmt.Errorf("%w: no payload stored", cold.ErrCorrupt)
	}
	return data, err
}
