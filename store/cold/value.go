package cold

import (
	"bytes"
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
func (t *Txn) PutValue(k []byte, v any) error { return t.PutSized(k, v, 0) }

// PutSized is PutValue of a value that encodes in about size bytes (Marshal).
func (t *Txn) PutSized(k []byte, v any, size int) error {
	b, err := Marshal(v, size)
	if err != nil {
		return err
	}
	return t.Set(k, b)
}

// Marshal is msgpack.Marshal into room for size bytes: a value that carries a message
// (an outbox entry, a log record) is written at once, where msgpack.Marshal's buffer
// starts at 64 bytes and doubles as it fills, copying and clearing all it holds each
// time — most of what encoding a large value cost.
func Marshal(v any, size int) ([]byte, error) {
	buf := bytes.NewBuffer(make([]byte, 0, max(size, 64)))
	enc := msgpack.GetEncoder()
	defer msgpack.PutEncoder(enc)
	enc.Reset(buf)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
