package pipeline

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// Batch and HopBatch, the wrappers of most events on the wire, write and read their
// MessagePack form themselves too, around Event's codec: the bytes reflection wrote (a
// map of the non-empty fields; TestBatchCodecMatchesReflection), and what reflection
// read — the map in any order, the array form in field order, nil for a zero value —
// with an unknown field an error (FuzzMsgpackBatch).

// AppendBatch appends b's MessagePack form to dst.
func AppendBatch(dst []byte, b *Batch) []byte {
	if len(b.Events) == 0 {
		return appendMapLen(dst, 0)
	}
	dst = AppendBatchHead(dst, len(b.Events))
	for i := range b.Events {
		dst = AppendEvent(dst, &b.Events[i])
	}
	return dst
}

// AppendBatchHead appends the MessagePack form of a batch of n events (n > 0) up to its
// events, which follow it each as AppendEvent writes it: a batch can be written from
// events where they lie, not copied into a slice of their own.
func AppendBatchHead(dst []byte, n int) []byte {
	return appendArrayLen(append(appendMapLen(dst, 1), "\xa6events"...), n)
}

// AppendHopBatchHead appends the MessagePack form of a hop batch up to its n events,
// which follow it each as AppendEvent writes it: a hop batch can be cut from events
// encoded once.
func AppendHopBatchHead(dst []byte, src uint32, seq uint64, n int) []byte {
	fields := 0
	for _, set := range [...]bool{src != 0, seq != 0, n > 0} {
		if set {
			fields++
		}
	}
	dst = appendMapLen(dst, fields)
	if src != 0 {
		dst = appendFixed(append(dst, "\xa3src"...), msgpcode.Uint32, uint64(src), 4) // as reflection writes a uint32
	}
	if seq != 0 {
		dst = appendFixed(append(dst, "\xa3seq"...), msgpcode.Uint64, seq, 8)
	}
	if n > 0 {
		dst = appendArrayLen(append(dst, "\xa6events"...), n)
	}
	return dst
}

// AppendHopBatch appends b's MessagePack form to dst.
func AppendHopBatch(dst []byte, b *HopBatch) []byte {
	dst = AppendHopBatchHead(dst, b.Source, b.Seq, len(b.Events))
	for i := range b.Events {
		dst = AppendEvent(dst, &b.Events[i])
	}
	return dst
}

// EncodeMsgpack writes b as AppendBatch does.
func (b Batch) EncodeMsgpack(enc *msgpack.Encoder) error {
	_, err := enc.Writer().Write(AppendBatch(nil, &b))
	return err
}

// EncodeMsgpack writes b as AppendHopBatch does.
func (b HopBatch) EncodeMsgpack(enc *msgpack.Encoder) error {
	_, err := enc.Writer().Write(AppendHopBatch(nil, &b))
	return err
}

// DecodeMsgpack reads b from a map (or the array form) of its field, as Unmarshal
// does (mpReader).
func (b *Batch) DecodeMsgpack(dec *msgpack.Decoder) error {
	raw, err := dec.DecodeRaw()
	if err != nil {
		return err
	}
	r := mpReader{b: raw}
	return r.done(r.readBatch(b, false))
}

// DecodeMsgpack reads b from a map (or the array form) of its fields, as Unmarshal
// does (mpReader).
func (b *HopBatch) DecodeMsgpack(dec *msgpack.Decoder) error {
	raw, err := dec.DecodeRaw()
	if err != nil {
		return err
	}
	r := mpReader{b: raw}
	return r.done(r.readHopBatch(b, false))
}

// eventSlots makes *evs n long for a list of n events to be read over it, as reflection
// does: nil (n < 0) makes it nil and an empty list an empty slice (done: nothing to
// read), and the events it holds at each place, within its capacity, are read over.
func eventSlots(evs *[]Event, n int, bounded bool) (done bool, err error) {
	switch {
	case n < 0:
		*evs = nil
		return true, nil
	case bounded && n > MaxBatch:
		return true, fmt.Errorf("%w (%d)", errBatchSize, n)
	case n == 0 && *evs == nil:
		*evs = []Event{}
		return true, nil
	}
	s := *evs
	if cap(s) >= n {
		s = s[:n]
	} else {
		// Room read over again and again (EventDecoder's) grows by half again at least,
		// not to each batch a little larger than the last: batches of about the same
		// size made one large allocation in every few.
		grown := make([]Event, n, max(n, min(cap(s)+cap(s)/2, maxRoom)))
		copy(grown, s[:cap(s)])
		s = grown
	}
	*evs = s
	return false, nil
}

func appendMapLen(dst []byte, n int) []byte {
	switch {
	case n < 16:
		return append(dst, msgpcode.FixedMapLow|byte(n))
	case n <= math.MaxUint16:
		return appendFixed(dst, msgpcode.Map16, uint64(n), 2)
	}
	return appendFixed(dst, msgpcode.Map32, uint64(n), 4)
}

func appendArrayLen(dst []byte, n int) []byte {
	switch {
	case n < 16:
		return append(dst, msgpcode.FixedArrayLow|byte(n))
	case n <= math.MaxUint16:
		return appendFixed(dst, msgpcode.Array16, uint64(n), 2)
	}
	return appendFixed(dst, msgpcode.Array32, uint64(n), 4)
}

func appendString(dst []byte, s string) []byte {
	switch n := len(s); {
	case n < 32:
		dst = append(dst, msgpcode.FixedStrLow|byte(n))
	case n < 256:
		dst = append(dst, msgpcode.Str8, byte(n))
	case n <= math.MaxUint16:
		dst = appendFixed(dst, msgpcode.Str16, uint64(n), 2)
	default:
		dst = appendFixed(dst, msgpcode.Str32, uint64(n), 4)
	}
	return append(dst, s...)
}

// appendUint appends v in the fewest bytes, as Encoder.EncodeUint does.
func appendUint(dst []byte, v uint64) []byte {
	switch {
	case v <= math.MaxInt8:
		return append(dst, byte(v))
	case v <= math.MaxUint8:
		return append(dst, msgpcode.Uint8, byte(v))
	case v <= math.MaxUint16:
		return appendFixed(dst, msgpcode.Uint16, v, 2)
	case v <= math.MaxUint32:
		return appendFixed(dst, msgpcode.Uint32, v, 4)
	}
	return appendFixed(dst, msgpcode.Uint64, v, 8)
}

// uintSize is how many bytes appendUint(dst, v) appends.
func uintSize(v uint64) int {
	switch {
	case v <= math.MaxInt8:
		return 1
	case v <= math.MaxUint8:
		return 2
	case v <= math.MaxUint16:
		return 3
	case v <= math.MaxUint32:
		return 5
	}
	return 9
}

// intSize is how many bytes appendInt(dst, v) appends.
func intSize(v int64) int {
	switch {
	case v >= 0:
		return uintSize(uint64(v))
	case v >= -32:
		return 1
	case v >= math.MinInt8:
		return 2
	case v >= math.MinInt16:
		return 3
	case v >= math.MinInt32:
		return 5
	}
	return 9
}

// arrayLenSize is how many bytes appendArrayLen(dst, n) appends.
func arrayLenSize(n int) int {
	switch {
	case n < 16:
		return 1
	case n <= math.MaxUint16:
		return 3
	}
	return 5
}

// appendInt appends v as msgpack.Encoder.EncodeInt does: as appendUint when not
// negative, else in the fewest bytes of a negative fixnum, int8, int16, int32 or int64.
func appendInt(dst []byte, v int64) []byte {
	switch {
	case v >= 0:
		return appendUint(dst, uint64(v))
	case v >= -32:
		return append(dst, byte(v))
	case v >= math.MinInt8:
		return append(dst, msgpcode.Int8, byte(v))
	case v >= math.MinInt16:
		return appendFixed(dst, msgpcode.Int16, uint64(v), 2)
	case v >= math.MinInt32:
		return appendFixed(dst, msgpcode.Int32, uint64(v), 4)
	}
	return appendFixed(dst, msgpcode.Int64, uint64(v), 8)
}

// appendFixed appends code and the low size bytes of v, big-endian.
func appendFixed(dst []byte, code byte, v uint64, size int) []byte {
	dst = append(dst, code)
	switch size {
	case 2:
		return binary.BigEndian.AppendUint16(dst, uint16(v))
	case 4:
		return binary.BigEndian.AppendUint32(dst, uint32(v))
	}
	return binary.BigEndian.AppendUint64(dst, v)
}
