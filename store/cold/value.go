package cold

import (
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"
	"github.com/vmihailenco/msgpack/v5"
)

// GetValue decodes the MessagePack value of k into v and reports whether k was there;
// v is left as it is when not. A value that does not decode is ErrCorrupt, named what.
func (t *Txn) GetValue(k []byte, v any, what string) (bool, error) {
	item, err := t.get(k)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	if err := item.Value(func(b []byte) error { return msgpack.Unmarshal(b, v) }); err != nil {
		return true, fmt.Errorf("%w: %s: %w", ErrCorrupt, what, err)
	}
	return true, nil
}

// PutValue stores v as the MessagePack value of k.
func (t *Txn) PutValue(k []byte, v any) error {
	b, err := msgpack.Marshal(v)
	if err != nil {
		return err
	}
	return t.Set(k, b)
}
