package window

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestSortIDs(t *testing.T) {
	f := func(ids []uint64) {
		t.Helper()
		in := make([]freshID, len(ids))
		for i, id := range ids {
			in[i] = freshID{id: id, off: uint32(i)}
		}
		got := sortIDs(in, make([]freshID, len(in)))
		want := slices.Sorted(slices.Values(ids))
		for i := range want {
			if got[i].id != want[i] || ids[got[i].off] != got[i].id {
				t.Fatalf("%d ids: at %d got %v, want %d", len(ids), i, got[i], want[i])
			}
		}
	}
	f(nil)
	f([]uint64{7})
	f([]uint64{3, 1, 2})
	r := rand.New(rand.NewPCG(1, 1))
	many := make([]uint64, 5000)
	for i := range many {
		many[i] = 1<<50 + r.Uint64N(1<<32) // the high bytes shared
	}
	f(many)
	for i := range many {
		many[i] = r.Uint64()
	}
	f(many)
}
