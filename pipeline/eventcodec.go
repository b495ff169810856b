package pipeline

import (
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

// DecodeMsgpack reads e from a map (or the array form) of its fields, as Unmarshal
// does (mpReader): for an event inside a value decoded by reflection.
func (e *Event) DecodeMsgpack(dec *msgpack.Decoder) error {
	raw, err := dec.DecodeRaw()
	if err != nil {
		return err
	}
	r := mpReader{b: raw}
	return r.done(r.readEvent(e))
}

// commonTypes are the event types read without allocating a string: every type a
// producer or a hop batch carries (a like's notification is one event in its hop batch),
// the most frequent first.
var commonTypes = []string{TypeLike, TypeView, TypeNotify, TypeUnlike, TypeComment, TypeFollow, TypeFollower, TypeRead, TypePost, TypePush,
	TypeRepost, TypeUncomment, TypeUnfollow, TypeMention, TypeDM, TypeIncr, TypeSystem}
