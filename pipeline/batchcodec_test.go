package pipeline

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// plainBatch and plainHopBatch are Batch and HopBatch without their codecs, of events
// without theirs: what reflection makes of them.
type plainBatch struct {
	Events []plainEvent `json:"events"`
}

type plainHopBatch struct {
	Source uint32       `json:"src"`
	Seq    uint64       `json:"seq"`
	Events []plainEvent `json:"events"`
}

func unplain(p []plainEvent) []Event {
	if p == nil {
		return nil
	}
	evs := make([]Event, len(p))
	for i := range p {
		evs[i] = Event(p[i])
	}
	return evs
}

func toPlain(evs []Event) []plainEvent {
	if evs == nil {
		return nil
	}
	p := make([]plainEvent, len(evs))
	for i := range evs {
		p[i] = plainEvent(evs[i])
	}
	return p
}

// msgpackReference is how batches were decoded before their own codec: the payload
// checked, then reflection.
func msgpackReference(data []byte, v any) error {
	if len(data) == 0 {
		return errors.New("empty payload")
	}
	if err := checkMsgpack(data); err != nil {
		return err
	}
	return reflectDecode(data, v)
}

// checkMsgpackBatches decodes data as a batch and as a hop batch, with the codecs and by
// reflection, and fails unless both accept it and make the same of it, or both reject it.
func checkMsgpackBatches(t *testing.T, data []byte) (Batch, HopBatch, error, error) {
	t.Helper()
	var b Batch
	var pb plainBatch
	errB, errRef := Unmarshal(data, false, &b), msgpackReference(data, &pb)
	if (errB == nil) != (errRef == nil) || errB == nil && !reflect.DeepEqual(b, Batch{Events: unplain(pb.Events)}) {
		t.Fatalf("%x as a batch: codec %#v (%v), reflection %#v (%v)", data, b, errB, pb, errRef)
	}
	var h HopBatch
	var ph plainHopBatch
	errH, errRef := Unmarshal(data, false, &h), msgpackReference(data, &ph)
	want := HopBatch{Source: ph.Source, Seq: ph.Seq, Events: unplain(ph.Events)}
	if (errH == nil) != (errRef == nil) || errH == nil && !reflect.DeepEqual(h, want) {
		t.Fatalf("%x as a hop batch: codec %#v (%v), reflection %#v (%v)", data, h, errH, ph, errRef)
	}
	return b, h, errB, errH
}

// randomEvents returns n random events, or nil or none when n is 0.
func randomEvents(r *rand.Rand, n int) []Event {
	if n == 0 && r.IntN(2) == 0 {
		return nil
	}
	evs := make([]Event, n)
	for i := range evs {
		evs[i] = randomEvent(r)
	}
	return evs
}

// TestBatchCodecMatchesReflection: Batch and HopBatch write what reflection wrote, byte
// for byte, and read back, from the map and the array form, what reflection reads.
func TestBatchCodecMatchesReflection(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 300 {
		evs := randomEvents(r, r.IntN(40)) // past a fixarray (15)
		h := HopBatch{Source: []uint32{0, 1, 15, 1 << 31}[r.IntN(4)], Seq: []uint64{0, 1, r.Uint64()}[r.IntN(3)], Events: evs}
		for _, c := range []struct {
			v, plain any
		}{
			{&Batch{Events: evs}, &plainBatch{Events: toPlain(evs)}},
			{&h, &plainHopBatch{Source: h.Source, Seq: h.Seq, Events: toPlain(evs)}},
		} {
			got, err := Marshal(c.v, false)
			if err != nil {
				t.Fatal(err)
			}
			want := reflectEncode(t, c.plain, false)
			if !bytes.Equal(got, want) {
				t.Fatalf("%T of %d events encodes as\n %x, reflection\n %x", c.v, len(evs), got[:min(len(got), 200)], want[:min(len(want), 200)])
			}
			var viaEncoder bytes.Buffer
			if err := msgpack.NewEncoder(&viaEncoder).Encode(c.v); err != nil || !bytes.Equal(viaEncoder.Bytes(), want) {
				t.Fatalf("%T through an Encoder: %x %v", c.v, viaEncoder.Bytes()[:min(viaEncoder.Len(), 200)], err)
			}
			for _, data := range [][]byte{want, reflectEncode(t, c.plain, true)} {
				checkMsgpackBatches(t, data)
			}
		}
		data := AppendHopBatchHead(nil, h.Source, h.Seq, len(evs))
		for i := range evs {
			data = AppendEvent(data, &evs[i])
		}
		if want := AppendHopBatch(nil, &h); !bytes.Equal(data, want) {
			t.Fatalf("head and events %x, hop batch %x", data, want)
		}
	}

	// Past an array16.
	evs := make([]Event, 1<<16)
	for i := range evs {
		evs[i] = Event{Type: TypeView, Post: ID(i)}
	}
	got, _ := Marshal(&Batch{Events: evs}, false)
	if want := reflectEncode(t, &plainBatch{Events: toPlain(evs)}, false); !bytes.Equal(got, want) {
		t.Fatalf("a batch of %d events encodes as %x…, reflection %x…", len(evs), got[:20], want[:20])
	}
	var b Batch
	if err := Unmarshal(got, false, &b); err != nil || !reflect.DeepEqual(b.Events, evs) {
		t.Fatalf("a batch of %d events decodes as %d events, %v", len(evs), len(b.Events), err)
	}
}

// TestBatchCodecAccepts what reflection accepted beyond what Tally writes, and rejects
// what it rejected.
func TestBatchCodecAccepts(t *testing.T) {
	enc := func(v any) []byte {
		data, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	like := map[string]any{"type": "like", "uid": 1, "post": 2}
	for _, c := range []struct {
		in      []byte
		wantErr string
	}{
		{in: []byte{0xc0}},            // nil
		{in: []byte{0x90}},            // the empty array form
		{in: []byte{0x80}},            // no field
		{in: enc([]any{[]any{like}})}, // the array form of a batch
		{in: enc([]any{7, 9, []any{like, nil}})},
		{in: enc(map[string]any{"events": []any{like}, "src": 1, "seq": nil})},
		{in: enc(map[string]any{"events": nil})},
		{in: []byte("\x82\xa6events\x92\x81\xa3uid\x01\x81\xa3uid\x02\xa6events\x91\x81\xa4post\x03")}, // read over the first list
		{in: []byte("\x81\xc4\x06events\x91\xc0")},                                                     // a bin key
		{in: enc(map[string]any{"events": []any{like}, "likes": 1}), wantErr: `unknown field "likes"`},
		{in: enc(map[string]any{"events": []any{map[string]any{"uid": "x"}}}), wantErr: "event 0: id"},
		{in: enc([]any{1, 2}), wantErr: "array"},
		{in: enc(map[string]any{"events": "like"}), wantErr: "msgpack"},
		{in: enc("batch"), wantErr: "msgpack"},
		{in: []byte{0x81, 0xa6, 'e', 'v', 'e', 'n', 't', 's', 0xdd, 0xff, 0xff, 0xff, 0xff}, wantErr: "exceeds"},
		{in: []byte{0x80, 0x80}, wantErr: "trailing"},
		{in: []byte{0xd5, 0x30, 0x80, 0x30}, wantErr: "code=d5"},                                            // a map in an extension
		{in: []byte("\x81\xa6events\x91\xd5\x30\x80\x30"), wantErr: "event 0: msgpack: unexpected code=d5"}, // an event in one
	} {
		_, _, errB, errH := checkMsgpackBatches(t, c.in)
		if c.wantErr == "" && errB != nil && errH != nil {
			t.Fatalf("%x: %v, %v", c.in, errB, errH)
		}
		if c.wantErr != "" && (errB == nil || !strings.Contains(errB.Error(), c.wantErr)) && (errH == nil || !strings.Contains(errH.Error(), c.wantErr)) {
			t.Fatalf("%x: %v, %v; want an error saying %q", c.in, errB, errH, c.wantErr)
		}
	}
}

// FuzzMsgpackBatch: Batch's and HopBatch's codecs and reflection accept and reject the
// same payloads, and make the same of what they accept.
func FuzzMsgpackBatch(f *testing.F) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 8 {
		evs := []Event{randomEvent(r), randomEvent(r)}
		f.Add(AppendBatch(nil, &Batch{Events: evs}))
		f.Add(AppendHopBatch(nil, &HopBatch{Source: 3, Seq: 9, Events: evs}))
	}
	f.Add([]byte("\x82\xa6events\x92\x81\xa3uid\x01\x81\xa3uid\x02\xa6events\x91\x81\xa4post\x03"))
	f.Add([]byte{0x93, 0x01, 0x02, 0x91, 0x80})
	f.Add([]byte{0xc0})
	f.Fuzz(func(t *testing.T, data []byte) { checkMsgpackBatches(t, data) })
}
