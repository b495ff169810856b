package pipeline

import (
	"encoding/binary"
	"fmt"

	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// Events, batches and hop batches arriving as one payload are read straight from its
// bytes (mpReader) rather than through msgpack.Decoder: a decoder call costs a method
// call, a peek and an unread per value, a few hundred nanoseconds an event. The reader
// accepts and rejects exactly what the Decoder-based DecodeMsgpack methods do, reads the
// same values and gives the same errors (FuzzMsgpackReader); those methods stay for
// events nested in other types decoded by reflection.
//
// checkMsgpack's guarantees hold without walking the payload first: the reader checks
// every length against the bytes left before it allocates, reads nothing nested deeper
// than an event's kinds, and consumes every byte of what it accepts. Only on an error is
// the payload checked, so that a truncated or malformed payload is named as before.

// mpReader reads MessagePack values from b, at i.
type mpReader struct {
	b []byte
	i int
}

// done ends the reading of one whole payload, with err the reader's error: what is left
// is refused, and a refused payload that is truncated or malformed is named as
// checkMsgpack names it.
func (r *mpReader) done(err error) error {
	if err == nil && r.i < len(r.b) {
		err = errTrailing
	}
	if err != nil {
		if cerr := checkMsgpack(r.b); cerr != nil {
			return cerr // what the payload was refused for before it was decoded
		}
	}
	return err
}

// code reads one type byte.
func (r *mpReader) code() (byte, error) {
	if r.i >= len(r.b) {
		return 0, errTruncated
	}
	c := r.b[r.i]
	r.i++
	return c, nil
}

// peek returns the next type byte without reading it.
func (r *mpReader) peek() (byte, error) {
	if r.i >= len(r.b) {
		return 0, errTruncated
	}
	return r.b[r.i], nil
}

// bytes reads the next n bytes, in place.
func (r *mpReader) bytes(n uint64) ([]byte, error) {
	if n > uint64(len(r.b)-r.i) {
		return nil, errTruncated
	}
	b := r.b[r.i : r.i+int(n)]
	r.i += int(n)
	return b, nil
}

// fixed reads a big-endian unsigned integer of size bytes.
func (r *mpReader) fixed(size int) (uint64, error) {
	b, err := r.bytes(uint64(size))
	if err != nil {
		return 0, err
	}
	switch size {
	case 1:
		return uint64(b[0]), nil
	case 2:
		return uint64(binary.BigEndian.Uint16(b)), nil
	case 4:
		return uint64(binary.BigEndian.Uint32(b)), nil
	}
	return binary.BigEndian.Uint64(b), nil
}

// integer reads the integer of code c as Decoder.DecodeInt64 does (the same bits as
// DecodeUint64 but for the sign of int8/16/32): nil is 0, every width of either sign
// is taken. ok is false for a code that is no integer.
func (r *mpReader) integer(c byte) (v int64, ok bool, err error) {
	var u uint64
	switch {
	case c == msgpcode.Nil:
		return 0, true, nil
	case c <= msgpcode.PosFixedNumHigh || c >= msgpcode.NegFixedNumLow:
		return int64(int8(c)), true, nil
	case c == msgpcode.Uint8 || c == msgpcode.Int8:
		u, err = r.fixed(1)
		if c == msgpcode.Int8 {
			return int64(int8(u)), true, err
		}
	case c == msgpcode.Uint16 || c == msgpcode.Int16:
		u, err = r.fixed(2)
		if c == msgpcode.Int16 {
			return int64(int16(u)), true, err
		}
	case c == msgpcode.Uint32 || c == msgpcode.Int32:
		u, err = r.fixed(4)
		if c == msgpcode.Int32 {
			return int64(int32(u)), true, err
		}
	case c == msgpcode.Uint64 || c == msgpcode.Int64:
		u, err = r.fixed(8)
	default:
		return 0, false, nil
	}
	return int64(u), true, err
}

// int64 reads an integer as Decoder.DecodeInt64 does.
func (r *mpReader) int64() (int64, error) {
	c, err := r.code()
	if err != nil {
		return 0, err
	}
	v, ok, err := r.integer(c)
	if !ok {
		return 0, fmt.Errorf("msgpack: invalid code=%x decoding int64", c)
	}
	return v, err
}

// uint64 reads an integer as Decoder.DecodeUint64 does: a negative one as its bits.
func (r *mpReader) uint64() (uint64, error) {
	c, err := r.code()
	if err != nil {
		return 0, err
	}
	v, ok, err := r.integer(c)
	if !ok {
		return 0, fmt.Errorf("msgpack: invalid code=%x decoding uint64", c)
	}
	return uint64(v), err
}

// bool reads a bool as Decoder.DecodeBool does, nil as false.
func (r *mpReader) bool() (bool, error) {
	c, err := r.code()
	switch {
	case err != nil:
		return false, err
	case c == msgpcode.Nil || c == msgpcode.False:
		return false, nil
	case c == msgpcode.True:
		return true, nil
	}
	return false, fmt.Errorf("msgpack: invalid code=%x decoding bool", c)
}

// strLen reads the head of a str or bin of code c, -1 for nil; ok is false for a code
// that is neither.
func (r *mpReader) strLen(c byte) (n int, ok bool, err error) {
	var u uint64
	switch {
	case c == msgpcode.Nil:
		return -1, true, nil
	case msgpcode.IsFixedString(c):
		return int(c & msgpcode.FixedStrMask), true, nil
	case c == msgpcode.Str8 || c == msgpcode.Bin8:
		u, err = r.fixed(1)
	case c == msgpcode.Str16 || c == msgpcode.Bin16:
		u, err = r.fixed(2)
	case c == msgpcode.Str32 || c == msgpcode.Bin32:
		u, err = r.fixed(4)
	default:
		return 0, false, nil
	}
	return int(u), true, err
}

// str reads a str or bin in place as Decoder.DecodeBytesLen and a read do: nil for nil.
func (r *mpReader) str() ([]byte, error) {
	// A fixstr, as every field name and most values are, without a call.
	if r.i < len(r.b) && msgpcode.IsFixedString(r.b[r.i]) {
		if j := r.i + 1 + int(r.b[r.i]&msgpcode.FixedStrMask); j <= len(r.b) {
			b := r.b[r.i+1 : j]
			r.i = j
			return b, nil
		}
	}
	return r.strSlow()
}

func (r *mpReader) strSlow() ([]byte, error) {
	c, err := r.code()
	if err != nil {
		return nil, err
	}
	n, ok, err := r.strLen(c)
	switch {
	case !ok:
		return nil, fmt.Errorf("msgpack: invalid code=%x decoding string/bytes length", c)
	case err != nil || n < 0:
		return nil, err
	}
	return r.bytes(uint64(n))
}

// string reads a string as Decoder.DecodeString does, nil as "".
func (r *mpReader) string() (string, error) {
	b, err := r.str()
	return string(b), err
}

// arrayLen reads the head of an array as Decoder.DecodeArrayLen does, -1 for nil. A
// length past the bytes left is refused (every element takes a byte at least), so
// that nothing is allocated for it.
func (r *mpReader) arrayLen() (int, error) {
	c, err := r.code()
	if err != nil {
		return 0, err
	}
	return r.arrayLenOf(c)
}

func (r *mpReader) arrayLenOf(c byte) (_ int, err error) {
	var n uint64
	switch {
	case c == msgpcode.Nil:
		return -1, nil
	case msgpcode.IsFixedArray(c):
		n = uint64(c & msgpcode.FixedArrayMask)
	case c == msgpcode.Array16:
		n, err = r.fixed(2)
	case c == msgpcode.Array32:
		n, err = r.fixed(4)
	default:
		return 0, fmt.Errorf("msgpack: invalid code=%x decoding array length", c)
	}
	if err == nil && n > uint64(len(r.b)-r.i) {
		err = errTruncated
	}
	return int(n), err
}

// mapLenOf reads the head of a map of code c, -1 for nil; a map wrapped in an extension
// is refused, as reflection refuses it.
func (r *mpReader) mapLenOf(c byte) (n int, err error) {
	var u uint64
	switch {
	case c == msgpcode.Nil:
		return -1, nil
	case msgpcode.IsFixedMap(c):
		u = uint64(c & msgpcode.FixedMapMask)
	case c == msgpcode.Map16:
		u, err = r.fixed(2)
	case c == msgpcode.Map32:
		u, err = r.fixed(4)
	default:
		return 0, fmt.Errorf("msgpack: unexpected code=%x decoding map length", c)
	}
	if err == nil && u > uint64(len(r.b)-r.i) {
		err = errTruncated
	}
	return int(u), err
}

// structLen reads the head of a struct's map (or array) form, -1 for nil.
func (r *mpReader) structLen() (n int, asArray bool, err error) {
	c, err := r.code()
	switch {
	case err != nil:
		return 0, false, err
	case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
		n, err := r.arrayLenOf(c)
		return n, true, err
	}
	n, err = r.mapLenOf(c)
	return n, false, err
}
