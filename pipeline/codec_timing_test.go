package pipeline

import (
	"encoding/json"
	"testing"
)

// BenchmarkBatchCodec decodes and encodes a batch of 1 000 likes, as the end-to-end
// benchmarks send them, with the codecs, each beside its baseline on the same batch in
// the same run: encoding/json (with DisallowUnknownFields, as before) for JSON, msgpack
// by reflection for MessagePack; msgpack-decode/decoder is the codec as it was before it
// read the bytes itself, through a msgpack.Decoder. decode-events is DecodeEvents, the
// whole path of a batch message: decoded, validated and the good events kept; its
// "-room" variants decode as an event stage does, into an EventDecoder's room.
// Run: go test ./pipeline -run XXX -bench BatchCodec -benchmem
func BenchmarkBatchCodec(b *testing.B) {
	fams := Families(DefaultFamilies())
	evs := benchLikes(1000)
	asJSON, err := json.Marshal(Batch{Events: evs})
	if err != nil {
		b.Fatal(err)
	}
	asMsgpack, _ := Marshal(&Batch{Events: evs}, false)
	plain := &plainBatch{Events: toPlain(evs)}
	dec := EventDecoder{Families: fams} // as an event stage decodes: into room it reuses
	for _, c := range []struct {
		name string
		run  func() error
	}{
		{"json-decode/codec", func() error { return Unmarshal(asJSON, true, &Batch{}) }},
		{"json-decode/encoding-json", func() error { return jsonReference(asJSON, &Batch{}) }},
		{"msgpack-decode/codec", func() error { return Unmarshal(asMsgpack, false, &Batch{}) }},
		{"msgpack-decode/decoder", func() error { var b Batch; return decodeMsgpack(asMsgpack, b.DecodeMsgpack) }},
		{"msgpack-decode/reflection", func() error { return msgpackReference(asMsgpack, &plainBatch{}) }},
		{"msgpack-encode/codec", func() error { _, err := Marshal(&Batch{Events: evs}, false); return err }},
		{"msgpack-encode/reflection", func() error { reflectEncode(b, plain, false); return nil }},
		{"decode-events/json", func() error { _, _, err := DecodeEvents(TypeBatch, asJSON, nil, fams); return err }},
		{"decode-events/msgpack", func() error { _, _, err := DecodeEvents(TypeBatch, asMsgpack, nil, fams); return err }},
		{"decode-events/msgpack-room", func() error { _, _, err := dec.Decode(TypeBatch, asMsgpack, nil); return err }},
		{"decode-events/json-room", func() error { _, _, err := dec.Decode(TypeBatch, asJSON, nil); return err }},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := c.run(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(evs)), "ns/event")
		})
	}
}
