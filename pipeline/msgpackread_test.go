package pipeline

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// sameError reports whether the reader's error err says what the Decoder's ref said.
// Only an id given as a container or an extension is named otherwise: the Decoder read
// it through, the reader refuses it by its type byte.
func sameError(err, ref error) bool {
	if err == nil || ref == nil {
		return err == ref
	}
	if strings.Contains(err.Error(), "not a container or an extension") {
		return true
	}
	return err.Error() == ref.Error()
}

// prior is what a value holds before it is decoded into: the codecs read over it (the
// map form sets only the fields it holds, a list reuses the events within capacity).
func prior() (Event, Batch, HopBatch) {
	e := Event{Type: TypeView, Tx: "old", Post: 5, Kinds: []string{"k"}, N: 3, Local: true}
	evs := make([]Event, 2, 4)
	evs[0], evs[1] = e, Event{UID: 9}
	evs2 := make([]Event, 2, 4)
	copy(evs2, evs)
	return e, Batch{Events: evs}, HopBatch{Source: 4, Seq: 8, Events: evs2}
}

// checkReader decodes data as an event, a batch and a hop batch (bounded and not) with
// mpReader and with the Decoder-based DecodeMsgpack methods, and fails unless both
// accept it and make the same of it, or both refuse it with the same error.
func checkReader(t *testing.T, data []byte) {
	t.Helper()
	for _, bounded := range []bool{false, true} {
		e, b, h := prior()
		refE, refB, refH := prior()
		err := readWhole(data, func(r *mpReader) error { return r.readEvent(&e) })
		ref := decodeMsgpack(data, refE.DecodeMsgpack)
		if !sameError(err, ref) || err == nil && !reflect.DeepEqual(e, refE) {
			t.Fatalf("%x as an event: reader %#v (%v), Decoder %#v (%v)", data, e, err, refE, ref)
		}
		err = readWhole(data, func(r *mpReader) error { return r.readBatch(&b, bounded) })
		ref = decodeMsgpack(data, func(dec *msgpack.Decoder) error { return refB.decodeMsgpack(dec, bounded) })
		if !sameError(err, ref) || err == nil && !reflect.DeepEqual(b, refB) {
			t.Fatalf("%x as a batch: reader %#v (%v), Decoder %#v (%v)", data, b, err, refB, ref)
		}
		err = readWhole(data, func(r *mpReader) error { return r.readHopBatch(&h, bounded) })
		ref = decodeMsgpack(data, func(dec *msgpack.Decoder) error { return refH.decodeMsgpack(dec, bounded) })
		if !sameError(err, ref) || err == nil && !reflect.DeepEqual(h, refH) {
			t.Fatalf("%x as a hop batch: reader %#v (%v), Decoder %#v (%v)", data, h, err, refH, ref)
		}
	}
}

// TestMsgpackReader: the reader accepts, refuses and reads what the Decoder-based
// codecs do, on what Tally writes, on what other encoders may write (every width of
// integer, either sign, nil, strings as bin, the array form) and on what is refused.
func TestMsgpackReader(t *testing.T) {
	enc := func(v any) []byte {
		data, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	r := rand.New(rand.NewPCG(7, 8))
	for range 200 {
		evs := randomEvents(r, r.IntN(20))
		checkReader(t, AppendBatch(nil, &Batch{Events: evs}))
		checkReader(t, AppendHopBatch(nil, &HopBatch{Source: r.Uint32(), Seq: r.Uint64(), Events: evs}))
		if len(evs) > 0 {
			checkReader(t, AppendEvent(nil, &evs[0]))
			checkReader(t, reflectEncode(t, (*plainEvent)(&evs[0]), true))
			checkReader(t, reflectEncode(t, &plainBatch{Events: toPlain(evs)}, true))
		}
	}
	ints := []any{nil, 0, 1, 127, 128, 255, 256, 65535, 65536, uint64(1) << 32, uint64(1) << 63, ^uint64(0),
		-1, -32, -33, -128, -129, -32768, -32769, int64(-1) << 31, int64(-1)<<31 - 1, int64(-1) << 63,
		int8(-5), int16(-5), int32(-5), int64(-5), uint8(5), uint16(5), uint32(5), uint64(5), int64(5),
		1.5, float32(2), true, false, "12", "x", "", []byte("34"), []any{1}, map[string]any{"a": 1}, msgpack.RawMessage{0xd4, 0x01, 0x02}}
	for _, v := range ints {
		for _, f := range []string{"uid", "n", "ts", "seq", "local", "type", "tx", "kinds"} {
			checkReader(t, enc(map[string]any{f: v}))
			checkReader(t, enc(map[string]any{"events": []any{map[string]any{f: v}}, "src": v}))
			checkReader(t, enc(map[string]any{"seq": v}))
		}
	}
	for _, data := range [][]byte{
		{0xc0}, {0x90}, {0x80}, {0x91, 0x80}, {0x93, 0x01, 0x02, 0x91, 0x80},
		{0x81, 0xc0, 0x01},                      // a nil key
		{0x81, 0x01, 0x01},                      // an integer key
		{0x81, 0xc4, 0x03, 'u', 'i', 'd', 0x05}, // a bin key
		{0xd5, 0x30, 0x80, 0x30},                // a map in an extension
		{0x9f}, {0xdc, 0x00, 0x0f}, {0x80, 0x80}, {0xc1}, {0x81},
		{0x81, 0xa6, 'e', 'v', 'e', 'n', 't', 's', 0xdd, 0xff, 0xff, 0xff, 0xff},
		enc([]any{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14}),
		enc(map[string]any{"kinds": []any{"a", nil, []byte("b")}}),
		enc(map[string]any{"kinds": []any{"a", 1}}),
		enc(map[string]any{"type": "likes", "likes": 1}),
		enc(map[string]any{"events": make([]any, MaxBatch+1)}),
		[]byte("\x82\xa6events\x92\x81\xa3uid\x01\x81\xa3uid\x02\xa6events\x91\x81\xa4post\x03"),
	} {
		checkReader(t, data)
	}
}

// FuzzMsgpackReader: mpReader and the Decoder-based codecs accept and refuse the same
// payloads as an event, a batch and a hop batch, with the same errors, and make the same
// of what they accept.
func FuzzMsgpackReader(f *testing.F) {
	r := rand.New(rand.NewPCG(9, 10))
	for range 8 {
		evs := []Event{randomEvent(r), randomEvent(r)}
		f.Add(AppendBatch(nil, &Batch{Events: evs}))
		f.Add(AppendHopBatch(nil, &HopBatch{Source: 3, Seq: 9, Events: evs}))
		f.Add(AppendEvent(nil, &evs[0]))
	}
	f.Add([]byte("\x82\xa6events\x92\x81\xa3uid\x01\x81\xa3uid\x02\xa6events\x91\x81\xa4post\x03"))
	f.Add([]byte{0x93, 0x01, 0x02, 0x91, 0x80})
	f.Add([]byte{0x81, 0xa3, 'u', 'i', 'd', 0xd0, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) { checkReader(t, data) })
}

// readWhole reads data whole with read, as Unmarshal does.
func readWhole(data []byte, read func(r *mpReader) error) error {
	r := mpReader{b: data}
	return r.done(read(&r))
}
