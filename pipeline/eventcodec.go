package pipeline

import (
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// Events are most of what Tally encodes and decodes, so Event writes and reads its
// MessagePack form itself rather than through reflection: the same map of JSON names
// without empty fields, byte for byte (TestEventCodecMatchesReflection), and decoding
// accepts what reflection accepted — a map in any order, the array form in field order,
// nil for a zero value — and rejects an unknown field.

// eventFields are Event's MessagePack names in field order (the array form's order).
var eventFields = []string{"type", "tx", "uid", "post", "owner", "target", "comment", "family", "id", "field", "n", "kinds", "ts", "local", "seq"}

// EncodeMsgpack writes e as a map of its non-empty fields (AppendEvent).
func (e *Event) EncodeMsgpack(enc *msgpack.Encoder) error {
	var buf [128]byte
	_, err := enc.Writer().Write(AppendEvent(buf[:0], e))
	return err
}

// AppendEvent appends e's MessagePack form to dst: a map of its non-empty fields.
func AppendEvent(dst []byte, e *Event) []byte {
	n := 0
	for _, empty := range [...]bool{e.Type == "", e.Tx == "", e.UID == 0, e.Post == 0, e.Owner == 0, e.Target == 0, e.Comment == 0,
		e.Family == "", e.ID == 0, e.Field == "", e.N == 0, len(e.Kinds) == 0, e.TS == 0, !e.Local, e.Seq == 0} {
		if !empty {
			n++
		}
	}
	dst = appendMapLen(dst, n)
	str := func(key, v string) {
		if v != "" {
			dst = appendString(append(dst, key...), v)
		}
	}
	id := func(key string, v ID) {
		if v != 0 {
			dst = appendUint(append(dst, key...), uint64(v))
		}
	}
	// Keys are written as fixstr (0xa0 | length), as the encoder writes short strings.
	str("\xa4type", e.Type)
	str("\xa2tx", e.Tx)
	id("\xa3uid", e.UID)
	id("\xa4post", e.Post)
	id("\xa5owner", e.Owner)
	id("\xa6target", e.Target)
	id("\xa7comment", e.Comment)
	str("\xa6family", e.Family)
	id("\xa2id", e.ID)
	str("\xa5field", e.Field)
	if e.N != 0 {
		dst = appendFixed(append(dst, "\xa1n"...), msgpcode.Int64, uint64(e.N), 8) // an int64 as reflection writes it: all 8 bytes
	}
	if len(e.Kinds) > 0 {
		dst = appendArrayLen(append(dst, "\xa5kinds"...), len(e.Kinds))
		for _, k := range e.Kinds {
			dst = appendString(dst, k)
		}
	}
	if e.TS != 0 {
		dst = appendFixed(append(dst, "\xa2ts"...), msgpcode.Int64, uint64(e.TS), 8)
	}
	if e.Local {
		dst = append(dst, "\xa5local"...)
		dst = append(dst, msgpcode.True)
	}
	if e.Seq != 0 {
		dst = appendFixed(append(dst, "\xa3seq"...), msgpcode.Uint64, e.Seq, 8) // a uint64, all 8 bytes; ids are written compact
	}
	return dst
}

// DecodeMsgpack reads e from a map (or the array form) of its fields.
func (e *Event) DecodeMsgpack(dec *msgpack.Decoder) error { return e.decodeMsgpack(dec, new([16]byte)) }

// decodeMsgpack is DecodeMsgpack reading field names and types into buf: every field
// name fits, read without allocating a string. A batch passes one buf for all of its
// events (it escapes into the decoder's reader, so each would be allocated).
func (e *Event) decodeMsgpack(dec *msgpack.Decoder, buf *[16]byte) error {
	c, err := dec.PeekCode()
	if err != nil {
		return err
	}
	if c == msgpcode.Nil {
		*e = Event{}
		return dec.DecodeNil()
	}
	if msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32 {
		n, err := dec.DecodeArrayLen()
		if err != nil {
			return err
		}
		if n <= 0 {
			*e = Event{}
			return nil
		}
		if n != len(eventFields) {
			return fmt.Errorf("msgpack: array of %d values for an event of %d fields", n, len(eventFields))
		}
		for _, name := range eventFields {
			if err := e.decodeField(dec, []byte(name), buf); err != nil {
				return err
			}
		}
		return nil
	}
	n, err := mapLen(dec)
	if err != nil {
		return err
	}
	for range n {
		name, err := fieldName(dec, buf[:])
		if err != nil {
			return err
		}
		if err := e.decodeField(dec, name, buf); err != nil {
			return err
		}
	}
	return nil
}

// fieldName reads a map key into buf when it fits (a longer one is no field of Event,
// read whole to be named in the error).
func fieldName(dec *msgpack.Decoder, buf []byte) ([]byte, error) {
	n, err := dec.DecodeBytesLen() // a str or bin of n bytes, -1 for nil
	switch {
	case err != nil:
		return nil, err
	case n < 0:
		return nil, nil
	case n > len(buf):
		buf = make([]byte, n)
	}
	return buf[:n], dec.ReadFull(buf[:n])
}

// decodeField reads the value of the field named name (which may be in buf).
func (e *Event) decodeField(dec *msgpack.Decoder, name []byte, buf *[16]byte) (err error) {
	switch string(name) {
	case "type":
		e.Type, err = decodeType(dec, buf)
	case "tx":
		e.Tx, err = dec.DecodeString()
	case "uid":
		err = decodeID(dec, &e.UID)
	case "post":
		err = decodeID(dec, &e.Post)
	case "owner":
		err = decodeID(dec, &e.Owner)
	case "target":
		err = decodeID(dec, &e.Target)
	case "comment":
		err = decodeID(dec, &e.Comment)
	case "family":
		e.Family, err = dec.DecodeString()
	case "id":
		err = decodeID(dec, &e.ID)
	case "field":
		e.Field, err = dec.DecodeString()
	case "n":
		e.N, err = dec.DecodeInt64()
	case "kinds":
		var n int
		if n, err = dec.DecodeArrayLen(); err != nil || n < 0 {
			return err
		}
		e.Kinds = make([]string, 0, min(n, 64))
		for range n {
			k, err := dec.DecodeString()
			if err != nil {
				return err
			}
			e.Kinds = append(e.Kinds, k)
		}
	case "ts":
		e.TS, err = dec.DecodeInt64()
	case "local":
		e.Local, err = dec.DecodeBool()
	case "seq":
		e.Seq, err = dec.DecodeUint64()
	default:
		return fmt.Errorf("msgpack: unknown field %q", name)
	}
	return err
}

// decodeType reads an event type, the common ones without allocating.
func decodeType(dec *msgpack.Decoder, buf *[16]byte) (string, error) {
	c, err := dec.PeekCode()
	if err != nil || !msgpcode.IsFixedString(c) {
		return dec.DecodeString()
	}
	b, err := fieldName(dec, buf[:])
	if err != nil {
		return "", err
	}
	for _, t := range commonTypes {
		if string(b) == t {
			return t, nil
		}
	}
	return string(b), nil
}

var commonTypes = []string{TypeLike, TypeView, TypeUnlike, TypeComment, TypeFollow, TypeRead, TypePost, TypeRepost}

// decodeID reads an id, nil as 0 (as reflection does for a custom decoder).
func decodeID(dec *msgpack.Decoder, id *ID) error {
	c, err := dec.PeekCode()
	switch {
	case err != nil:
		return err
	case c == msgpcode.Nil:
		*id = 0
		return dec.DecodeNil()
	case c <= msgpcode.PosFixedNumHigh || c >= msgpcode.Uint8 && c <= msgpcode.Uint64:
		v, err := dec.DecodeUint64()
		*id = ID(v)
		return err
	case c >= msgpcode.NegFixedNumLow || c >= msgpcode.Int8 && c <= msgpcode.Int64:
		v, err := dec.DecodeInt64()
		if err == nil && v < 0 {
			return fmt.Errorf("id %d is negative", v)
		}
		*id = ID(v)
		return err
	}
	return id.DecodeMsgpack(dec) // a decimal string, or an error
}
