package pipeline

import (
	"bytes"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// reflected is Change without its codec: what reflection writes.
type reflected Change

// TestChangeCodecMatchesReflection: the hand-written encoding of a change event is the
// one reflection wrote, byte for byte, and decodes back to it.
func TestChangeCodecMatchesReflection(t *testing.T) {
	for _, c := range []Change{
		{},
		{IDs: []ID{1, 1 << 40, 1<<64 - 1}, Fields: []string{"like", "repost", "comment", "view"},
			Counts: [][]uint64{{0, 1, 2, 3}, {1 << 33, 0, 0, 1<<64 - 1}, nil}},
		{IDs: []ID{7}, Counts: [][]uint64{{}}},
		bigChange(70_000), // lengths past 16 bits
	} {
		got, err := Marshal(&c, false)
		if err != nil {
			t.Fatal(err)
		}
		r := reflected(c)
		var buf bytes.Buffer
		enc := msgpack.NewEncoder(&buf)
		enc.SetCustomStructTag("json")
		enc.SetOmitEmpty(true)
		if err := enc.Encode(&r); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, buf.Bytes()) {
			t.Fatalf("%+v:\n codec      %x\n reflection %x", c, got, buf.Bytes())
		}
		// Size leaves room enough: the encoding never grows its buffer.
		if room := make([]byte, 0, c.Size()); cap(AppendChange(room, &c)) != c.Size() {
			t.Fatalf("%+v: %d bytes encoded, Size %d", c, len(got), c.Size())
		}
		// Through an Encoder (a Change inside another value): the same bytes.
		var viaEnc bytes.Buffer
		if err := msgpack.NewEncoder(&viaEnc).Encode(&c); err != nil || !bytes.Equal(viaEnc.Bytes(), got) {
			t.Fatalf("%+v: through an Encoder %x (%v), want %x", c, viaEnc.Bytes(), err, got)
		}
		var back Change
		if err := Unmarshal(got, false, &back); err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
	}
}

// BenchmarkChangeEncode is a checkpoint's change event of 1 000 ids, by the codec and by
// reflection.
// Run: go test ./pipeline -run XXX -bench ChangeEncode -benchmem
func BenchmarkChangeEncode(b *testing.B) {
	c := Change{Fields: []string{"like", "repost", "comment", "view"}}
	for i := range 1000 {
		c.IDs = append(c.IDs, ID(1<<41+i))
		c.Counts = append(c.Counts, []uint64{uint64(i), 0, 3, uint64(i * 7)})
	}
	b.Run("codec", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, err := Marshal(&c, false); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("reflection", func(b *testing.B) {
		r := reflected(c)
		b.ReportAllocs()
		for range b.N {
			if _, err := Marshal(&r, false); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// bigChange is a change event of n ids, each with four counts of every width.
func bigChange(n int) Change {
	c := Change{Fields: []string{"like", "repost", "comment", "view"}}
	for i := range n {
		c.IDs = append(c.IDs, ID(uint64(i)<<(i%64)))
		c.Counts = append(c.Counts, []uint64{uint64(i), 1 << (i % 64), 0, uint64(i) * 300})
	}
	return c
}
