package pipeline

import (
	"bytes"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// plainEvent is Event without its codec: what reflection makes of it.
type plainEvent Event

func reflectEncode(t testing.TB, v any, asArray bool) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.SetCustomStructTag("json")
	enc.SetOmitEmpty(true)
	enc.UseArrayEncodedStructs(asArray)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func reflectDecode(data []byte, v any) error {
	d := msgpack.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields(true)
	d.SetCustomStructTag("json")
	return d.Decode(v)
}

func randomEvent(r *rand.Rand) Event {
	pick := func(s ...string) string { return s[r.IntN(len(s))] }
	id := func() ID {
		switch r.IntN(4) {
		case 0:
			return 0
		case 1:
			return ID(r.IntN(200))
		case 2:
			return ID(r.Uint64())
		}
		return ID(r.IntN(1 << 20))
	}
	e := Event{Type: pick("", "like", "view", "read"), Tx: pick("", "t1", strings.Repeat("x", 40)),
		UID: id(), Post: id(), Owner: id(), Target: id(), Comment: id(), Family: pick("", "post"), ID: id(),
		Field: pick("", "like"), N: int64(r.IntN(5)) - 2, TS: []int64{0, 1, -1, 1_700_000_000_000}[r.IntN(4)],
		Local: r.IntN(2) == 0, Seq: uint64(id())}
	switch r.IntN(3) {
	case 0:
		e.Kinds = []string{}
	case 1:
		e.Kinds = []string{"like", "dm"}
	}
	return e
}

// TestEventCodecMatchesReflection: Event's own MessagePack codec writes what reflection
// wrote, byte for byte, and reads back what reflection reads, in a batch too.
func TestEventCodecMatchesReflection(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		e := randomEvent(r)
		got, err := Marshal(&e, false)
		if err != nil {
			t.Fatal(err)
		}
		want := reflectEncode(t, (*plainEvent)(&e), false)
		if !bytes.Equal(got, want) {
			t.Fatalf("%+v encodes as\n %x, reflection\n %x", e, got, want)
		}
		for _, data := range [][]byte{want, reflectEncode(t, (*plainEvent)(&e), true)} {
			var back Event
			var ref plainEvent
			errBack, errRef := Unmarshal(data, false, &back), reflectDecode(data, &ref)
			if (errBack != nil) != (errRef != nil) || !reflect.DeepEqual(back, Event(ref)) {
				t.Fatalf("%x decodes as %+v (%v), reflection %+v (%v)", data, back, errBack, ref, errRef)
			}
		}
	}
	evs := []Event{randomEvent(r), randomEvent(r), {}}
	data, err := Marshal(&Batch{Events: evs}, false)
	if err != nil {
		t.Fatal(err)
	}
	var b Batch
	if err := Unmarshal(data, false, &b); err != nil || len(b.Events) != 3 {
		t.Fatalf("batch: %+v %v", b, err)
	}
	for i := range evs {
		if len(evs[i].Kinds) == 0 {
			evs[i].Kinds = nil // an empty list is not sent
		}
		if !reflect.DeepEqual(b.Events[i], evs[i]) {
			t.Fatalf("batch event %d: %+v, want %+v", i, b.Events[i], evs[i])
		}
	}
}

// TestEventCodecAccepts what producers in other languages may send, as reflection did:
// fields in any order, ids as decimal strings, nil for a zero value; and rejects an
// unknown field and a wrong type.
func TestEventCodecAccepts(t *testing.T) {
	enc := func(m map[string]any) []byte {
		data, err := msgpack.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	for _, c := range []struct {
		in      map[string]any
		wantErr string
	}{
		{in: map[string]any{"ts": 5, "uid": "42", "type": "like", "post": uint64(1) << 63, "kinds": nil, "owner": nil, "n": -3}},
		{in: map[string]any{"type": "like", "likes": 1}, wantErr: "unknown field"},
		{in: map[string]any{"uid": -1}, wantErr: "negative"},
		{in: map[string]any{"uid": 1.5}, wantErr: "id must be"},
		{in: map[string]any{"ts": "soon"}, wantErr: "msgpack"},
		{in: map[string]any{"local": 1}, wantErr: "bool"},
	} {
		data := enc(c.in)
		var e Event
		var ref plainEvent
		err, errRef := Unmarshal(data, false, &e), reflectDecode(data, &ref)
		if (err == nil) != (errRef == nil) {
			t.Fatalf("%v: codec %v, reflection %v", c.in, err, errRef)
		}
		if c.wantErr == "" {
			if err != nil || !reflect.DeepEqual(e, Event(ref)) || e.UID != 42 || e.Post != 1<<63 || e.N != -3 {
				t.Fatalf("%v: %+v %v, reflection %+v", c.in, e, err, ref)
			}
		} else if err == nil || !strings.Contains(err.Error(), c.wantErr) {
			t.Fatalf("%v: error %v, want one saying %q", c.in, err, c.wantErr)
		}
	}
}

// BenchmarkEventCodec encodes and decodes a batch of 1 000 likes with Event's codec,
// beside reflection on the same events; decode/decoder is the codec through a
// msgpack.Decoder, as it read before it read the bytes itself.
// Run: go test ./pipeline -run XXX -bench EventCodec
func BenchmarkEventCodec(b *testing.B) {
	evs := make([]Event, 1000)
	plain := make([]plainEvent, len(evs))
	for i := range evs {
		evs[i] = Event{Type: "like", UID: ID(1 + i), Post: ID(1<<41 + i*7), Owner: ID(99), Tx: "tx-" + ID(i).String()}
		plain[i] = plainEvent(evs[i])
	}
	type plainBatch struct {
		Events []plainEvent `json:"events"`
	}
	for _, c := range []struct {
		name string
		v    any
		into func() any
	}{
		{"codec", &Batch{Events: evs}, func() any { return &Batch{} }},
		{"reflection", &plainBatch{Events: plain}, func() any { return &plainBatch{} }},
	} {
		data, err := Marshal(c.v, false)
		if err != nil {
			b.Fatal(err)
		}
		b.Run("encode/"+c.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := Marshal(c.v, false); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(evs)), "ns/event")
		})
		if c.name == "codec" {
			b.Run("decode/decoder", func(b *testing.B) {
				for b.Loop() {
					var batch Batch
					if err := decodeMsgpack(data, batch.DecodeMsgpack); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(evs)), "ns/event")
			})
		}
		b.Run("decode/"+c.name, func(b *testing.B) {
			for b.Loop() {
				if err := Unmarshal(data, false, c.into()); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(evs)), "ns/event")
		})
	}
}

// TestEveryTypeReadWithoutAllocating: each event type, public or internal, is read from
// a payload as one of commonTypes' strings, not a new one.
func TestEveryTypeReadWithoutAllocating(t *testing.T) {
	types := append(Types(), TypeNotify, TypePush, TypeFollower)
	for _, typ := range types {
		if !slices.Contains(commonTypes, typ) {
			t.Errorf("type %q is not in commonTypes", typ)
		}
		raw := []byte(typ)
		if allocs := testing.AllocsPerRun(10, func() { _ = internType(raw) }); allocs != 0 {
			t.Errorf("type %q: %v allocations, want 0", typ, allocs)
		}
	}
}
