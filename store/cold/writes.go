package cold

import (
	"encoding/binary"
	"fmt"
)

// A transaction's writes, as AppendWrites records them: for each key written, once, a
// byte saying what became of it (writeSet, writeDelete), the key's length (uvarint) and
// the key, and for a key set its value's length (uvarint) and the value. Keys are in no
// order: each appears once.
const (
	writeDelete byte = 0
	writeSet    byte = 1
)

// AppendWrites appends to b what the transaction has written so far, as its commit would
// write it (each key once: the value last set, or deleted), and reports whether all of it
// took at most limit bytes; when not, it returns b as it was. ApplyWrites writes it into
// another transaction: a standby applies its owner's transaction from it rather than
// executing the owner's events again (stages/event's Mirror).
func (t *Txn) AppendWrites(b []byte, limit int) ([]byte, bool) {
	n0, ok := len(b), true
	t.b.PendingWrites(func(k, v []byte, deleted bool) bool {
		if len(b)-n0+len(k)+len(v)+2*binary.MaxVarintLen32+1 > limit {
			ok = false
			return false
		}
		if deleted {
			b = append(b, writeDelete)
			b = binary.AppendUvarint(b, uint64(len(k)))
			b = append(b, k...)
			return true
		}
		b = append(b, writeSet)
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
		return true
	})
	if !ok {
		return b[:n0], false
	}
	return b, true
}

// ApplyWrites writes into t the writes another transaction recorded (AppendWrites). The
// keys and values are w's: w must not change until t commits. A record it cannot read
// is ErrCorrupt, with t holding the writes before the damage: discard it.
func (t *Txn) ApplyWrites(w []byte) error {
	return eachWrite(w, func(k, v []byte, deleted bool) error {
		if deleted {
			return t.Delete(k)
		}
		return t.Set(k, v)
	})
}

// eachWrite calls fn with each write w records, in order.
func eachWrite(w []byte, fn func(k, v []byte, deleted bool) error) error {
	for i := 0; len(w) > 0; i++ {
		op := w[0]
		if op != writeSet && op != writeDelete {
			return fmt.Errorf("%w: write %d: kind %d", ErrCorrupt, i, op)
		}
		k, rest, ok := lengthPrefixed(w[1:])
		if !ok || len(k) == 0 {
			return fmt.Errorf("%w: write %d: key cut short", ErrCorrupt, i)
		}
		var v []byte
		if op == writeSet {
			if v, rest, ok = lengthPrefixed(rest); !ok {
				return fmt.Errorf("%w: write %d: value cut short", ErrCorrupt, i)
			}
		}
		if err := fn(k, v, op == writeDelete); err != nil {
			return err
		}
		w = rest
	}
	return nil
}

// lengthPrefixed splits b into the bytes its uvarint length prefix says and what follows.
func lengthPrefixed(b []byte) (field, rest []byte, ok bool) {
	n, m := binary.Uvarint(b)
	if m <= 0 || n > uint64(len(b)-m) {
		return nil, nil, false
	}
	b = b[m:]
	return b[:n:n], b[n:], true
}
