package pipeline

// The codecs through msgpack.Decoder that events, batches and hop batches were read by
// before mpReader: the reference the reader is tested against (TestMsgpackReader,
// FuzzMsgpackReader), kept here since nothing else reads through them.

import (
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

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

// decodeMsgpack is DecodeMsgpack; bounded stops at a list of more than MaxBatch events.
func (b *Batch) decodeMsgpack(dec *msgpack.Decoder, bounded bool) error {
	n, asArray, err := structLen(dec)
	switch {
	case err != nil:
		return err
	case n <= 0 && (asArray || n < 0):
		*b = Batch{}
		return nil
	case asArray && n != 1:
		return fmt.Errorf("msgpack: array of %d values for a batch of 1 field", n)
	}
	buf := new([16]byte)
	if asArray {
		return decodeEventList(dec, &b.Events, bounded, buf)
	}
	for range n {
		name, err := fieldName(dec, buf[:])
		if err != nil {
			return err
		}
		if string(name) != "events" {
			return fmt.Errorf("msgpack: unknown field %q", name)
		}
		if err := decodeEventList(dec, &b.Events, bounded, buf); err != nil {
			return err
		}
	}
	return nil
}

// decodeMsgpack is DecodeMsgpack; bounded stops at a list of more than MaxBatch events.
func (b *HopBatch) decodeMsgpack(dec *msgpack.Decoder, bounded bool) error {
	n, asArray, err := structLen(dec)
	switch {
	case err != nil:
		return err
	case n <= 0 && (asArray || n < 0):
		*b = HopBatch{}
		return nil
	case asArray && n != 3:
		return fmt.Errorf("msgpack: array of %d values for a hop batch of 3 fields", n)
	}
	buf := new([16]byte)
	field := func(name []byte) error {
		switch string(name) {
		case "src":
			v, err := dec.DecodeUint64()
			b.Source = uint32(v) // truncated, as reflection sets a uint32
			return err
		case "seq":
			var err error
			b.Seq, err = dec.DecodeUint64()
			return err
		case "events":
			return decodeEventList(dec, &b.Events, bounded, buf)
		}
		return fmt.Errorf("msgpack: unknown field %q", name)
	}
	if asArray {
		for _, name := range [...]string{"src", "seq", "events"} {
			if err := field([]byte(name)); err != nil {
				return err
			}
		}
		return nil
	}
	for range n {
		name, err := fieldName(dec, buf[:])
		if err != nil {
			return err
		}
		if err := field(name); err != nil {
			return err
		}
	}
	return nil
}

// structLen reads the head of a struct's map (or array) form, as reflection does: its
// length, -1 for nil.
func structLen(dec *msgpack.Decoder) (n int, asArray bool, err error) {
	c, err := dec.PeekCode()
	switch {
	case err != nil:
		return 0, false, err
	case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
		n, err := dec.DecodeArrayLen()
		return n, true, err
	}
	n, err = mapLen(dec)
	return n, false, err
}

// mapLen reads the head of a map, -1 for nil. Decoder.DecodeMapLen would also take a map
// wrapped in an extension, which reflection refuses.
func mapLen(dec *msgpack.Decoder) (int, error) {
	c, err := dec.PeekCode()
	switch {
	case err != nil:
		return 0, err
	case !msgpcode.IsExt(c):
		return dec.DecodeMapLen()
	}
	return 0, fmt.Errorf("msgpack: unexpected code=%x decoding map length", c)
}

// decodeEventList reads a list of events into *evs as reflection does: nil makes it nil,
// and the list is read over the events *evs holds at each place (within its capacity).
func decodeEventList(dec *msgpack.Decoder, evs *[]Event, bounded bool, buf *[16]byte) error {
	n, err := dec.DecodeArrayLen()
	if err != nil {
		return err
	}
	if done, err := eventSlots(evs, n, bounded); done || err != nil {
		return err
	}
	s := *evs
	for i := range s {
		if err := s[i].decodeMsgpack(dec, buf); err != nil {
			return fmt.Errorf("event %d: %w", i, err)
		}
	}
	return nil
}
