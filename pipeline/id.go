package pipeline

import (
	"bytes"
	"fmt"
	"strconv"

	"github.com/vmihailenco/msgpack/v5"
)

// ID is an unsigned 64-bit id. On the wire it may be a number or a decimal string
// (JavaScript cannot hold 64-bit integers), in JSON and in MessagePack alike.
type ID uint64

// ParseID parses a decimal id.
func ParseID(s string) (ID, error) {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, &idError{fmt.Sprintf("id %q is not an unsigned 64-bit decimal number", s)}
	}
	return ID(v), nil
}

// idError is a value that is not an id, said in the contract's words, so that a bad
// request's error can quote it (see DecodeRequest).
type idError struct{ msg string }

func (e *idError) Error() string { return e.msg }

func (id ID) String() string { return strconv.FormatUint(uint64(id), 10) }

// UnmarshalJSON accepts 123 and "123".
func (id *ID) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) >= 2 && b[0] == '"' && b[len(b)-1] == '"' {
		b = b[1 : len(b)-1]
	}
	v, err := ParseID(string(b))
	if err != nil {
		return err
	}
	*id = v
	return nil
}

// DecodeMsgpack accepts any non-negative integer or a decimal string.
func (id *ID) DecodeMsgpack(d *msgpack.Decoder) error {
	v, err := d.DecodeInterfaceLoose()
	if err != nil {
		return err
	}
	switch v := v.(type) {
	case uint64:
		*id = ID(v)
	case int64:
		if v < 0 {
			return &idError{fmt.Sprintf("id %d is negative", v)}
		}
		*id = ID(v)
	case string:
		p, err := ParseID(v)
		if err != nil {
			return err
		}
		*id = p
	default:
		return &idError{fmt.Sprintf("id must be an integer or a decimal string, not %T", v)}
	}
	return nil
}

// EncodeMsgpack writes the id as an unsigned integer.
func (id ID) EncodeMsgpack(e *msgpack.Encoder) error { return e.EncodeUint(uint64(id)) }
