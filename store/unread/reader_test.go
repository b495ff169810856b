package unread

import (
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func randomReader(r *rand.Rand) ReaderState {
	v := func() uint64 { return [...]uint64{0, 1, uint64(r.IntN(1000)), r.Uint64()}[r.IntN(4)] }
	st := ReaderState{Comment: v(), Mention: v(), Like: v(), DM: v(), Feed: v(), System: v(), Inline: r.IntN(2) == 0}
	for i := range 4 {
		st.Noted[i], st.Keyed[i] = v(), v()
		at := uint64(0)
		for range r.IntN(maxInlineNotes + 1) {
			at += 1 + uint64(r.IntN(1<<20))
			st.Pending[i] = append(st.Pending[i], at)
		}
	}
	return st
}

// TestReaderCodec: a reader state reads back as written, in its compact form and in the
// MessagePack form written before it.
func TestReaderCodec(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	for range 2000 {
		st := randomReader(r)
		got, err := decodeReader(appendReader(nil, &st))
		if err != nil || !reflect.DeepEqual(got, st) {
			t.Fatalf("compact: %+v read back as %+v (%v)", st, got, err)
		}
		old, err := msgpack.Marshal(&st)
		if err != nil {
			t.Fatal(err)
		}
		if got, err = decodeReader(old); err != nil || !reflect.DeepEqual(got, st) {
			t.Fatalf("MessagePack: %+v read back as %+v (%v)", st, got, err)
		}
	}
	if got, err := decodeReader(appendReader(nil, &ReaderState{Like: 3})[:5]); err == nil {
		t.Fatalf("a state cut short read as %+v", got)
	}
}

// FuzzReader: whatever a reader state's bytes are, decoding fails or gives a state that
// writes back to a form that reads the same.
func FuzzReader(f *testing.F) {
	st := randomReader(rand.New(rand.NewPCG(1, 2)))
	f.Add(appendReader(nil, &st))
	old, _ := msgpack.Marshal(&st)
	f.Add(old)
	f.Fuzz(func(t *testing.T, v []byte) {
		st, err := decodeReader(v)
		if err != nil {
			return
		}
		back, err := decodeReader(appendReader(nil, &st))
		if err != nil || !reflect.DeepEqual(back, st) {
			t.Fatalf("%+v written and read back as %+v (%v)", st, back, err)
		}
	})
}
