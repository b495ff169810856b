package pipeline

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// randomDeltaBatch is a batch whose integers reach every width of MessagePack, of
// either sign.
func randomDeltaBatch(rng *rand.Rand, deltas, windows int) *DeltaBatch {
	num := func() uint64 { return rng.Uint64() >> rng.IntN(64) }
	signed := func() int64 {
		if v := int64(num() >> 1); rng.IntN(2) == 0 {
			return -v
		} else {
			return v
		}
	}
	b := &DeltaBatch{Source: uint32(num()), Seq: num()}
	for range deltas {
		b.Deltas = append(b.Deltas, Delta{ID: num(), Field: uint8(num()), Op: Op(rng.IntN(2)), N: signed()})
	}
	for range windows {
		b.Windows = append(b.Windows, WindowDelta{ID: num(), Field: uint8(num()), Minute: uint32(num()), N: signed()})
	}
	return b
}

// TestDeltaBatchCodecs holds AppendDeltaBatch and DecodeDeltaBatch to the codec through
// msgpack.Encoder and Decoder they replace: the same bytes, and the same batches
// accepted and refused — batches whole, cut short, with a byte changed or one added.
func TestDeltaBatchCodecs(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	extremes := &DeltaBatch{Source: math.MaxUint32, Seq: math.MaxUint64, Deltas: []Delta{
		{ID: math.MaxUint64, Field: 255, Op: OpSet, N: math.MinInt64}, {N: math.MaxInt64}, {N: -32}, {N: -33},
		{N: math.MinInt8}, {N: math.MinInt8 - 1}, {N: math.MinInt16 - 1}, {N: math.MinInt32 - 1}, {N: 127}, {N: 128}}}
	batches := []*DeltaBatch{{}, extremes}
	for i := range 2000 {
		batches = append(batches, randomDeltaBatch(rng, rng.IntN(40), []int{0, 0, rng.IntN(20)}[i%3]))
	}
	for i, b := range batches {
		data := AppendDeltaBatch(nil, b)
		if want := encoderDeltaBatch(nil, b); string(data) != string(want) {
			t.Fatalf("batch %d: encoded %x, msgpack.Encoder %x", i, data, want)
		}
		if b.Size() != len(data) {
			t.Fatalf("batch %d: Size %d, encoded in %d bytes", i, b.Size(), len(data))
		}
		payloads := [][]byte{data, data[:len(data)/2], append(data[:len(data):len(data)], 0)}
		if len(data) > 0 {
			bad := append([]byte(nil), data...)
			bad[rng.IntN(len(bad))] = byte(rng.Uint32())
			payloads = append(payloads, bad)
		}
		for _, p := range payloads {
			sameDecoding(t, p)
		}
	}
}

// sameDecoding fails unless DecodeDeltaBatch and the Decoder's codec both refuse p, or
// both decode it to the same batch.
func sameDecoding(t *testing.T, p []byte) {
	t.Helper()
	var got, want DeltaBatch
	err, werr := DecodeDeltaBatch(p, &got), decoderDeltaBatch(p, &want)
	switch {
	case (err == nil) != (werr == nil):
		t.Fatalf("payload %x: decoded with error %v, msgpack.Decoder's %v", p, err, werr)
	case err == nil && fmt.Sprint(got) != fmt.Sprint(want):
		t.Fatalf("payload %x: decoded %+v, msgpack.Decoder %+v", p, got, want)
	}
}

func FuzzDeltaBatchCodecs(f *testing.F) {
	f.Add(AppendDeltaBatch(nil, randomDeltaBatch(rand.New(rand.NewPCG(3, 4)), 3, 2)))
	f.Add([]byte{0x93, 0x01, 0x02, 0xdd, 0x7f, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) { sameDecoding(t, data) })
}

// BenchmarkDeltaBatchCodec is a batch of 200 deltas and 200 window deltas written and
// read by the codec and by msgpack.Encoder and Decoder (the codec before).
func BenchmarkDeltaBatchCodec(b *testing.B) {
	batch := randomDeltaBatch(rand.New(rand.NewPCG(5, 6)), 200, 200)
	data := AppendDeltaBatch(nil, batch)
	for _, c := range []struct {
		name   string
		encode func([]byte, *DeltaBatch) []byte
		decode func([]byte, *DeltaBatch) error
	}{{"codec", AppendDeltaBatch, DecodeDeltaBatch}, {"msgpack", encoderDeltaBatch, decoderDeltaBatch}} {
		b.Run("encode/"+c.name, func(b *testing.B) {
			b.ReportAllocs()
			buf := make([]byte, 0, 2*len(data))
			for b.Loop() {
				buf = c.encode(buf[:0], batch)
			}
		})
		b.Run("decode/"+c.name, func(b *testing.B) {
			b.ReportAllocs()
			var out DeltaBatch
			for b.Loop() {
				if err := c.decode(data, &out); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
