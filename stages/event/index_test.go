package event

import (
	"math/rand/v2"
	"testing"
)

// An index holds what a map of the same keys holds, through growth, clears and the wrap
// of its generation number, for keys that differ in one word or in few bits.
func TestIndexAsMap(t *testing.T) {
	type key struct{ a, b uint64 }
	r := rand.New(rand.NewPCG(3, 4))
	var x index[int32]
	want := map[key]int32{}
	check := func(when string) {
		t.Helper()
		if x.len() != len(want) {
			t.Fatalf("%s: %d keys, want %d", when, x.len(), len(want))
		}
		for k, v := range want {
			if got, ok := x.get(k.a, k.b); !ok || got != v {
				t.Fatalf("%s: key %v is %d (%v), want %d", when, k, got, ok, v)
			}
		}
	}
	for round := range 100 {
		if round == 1 {
			x.gen = ^uint32(0) // this round's clear wraps: round 0's slots are generation 1
		}
		for range r.IntN(2000) {
			k := key{r.Uint64N(500), r.Uint64N(4)} // few bits
			if r.IntN(4) == 0 {
				k.a += 1 << 62 // and high ones
			}
			p, ok := x.ref(k.a, k.b)
			if _, had := want[k]; had != ok {
				t.Fatalf("round %d: ref of %v said there %v, want %v", round, k, ok, had)
			}
			if !ok && *p != 0 {
				t.Fatalf("round %d: a new key holds %d", round, *p)
			}
			*p++
			want[k] = *p
		}
		if _, ok := x.get(1<<40, 9); ok {
			t.Fatal("a key never added is there")
		}
		check("before the clear")
		x.clear()
		clear(want)
		check("after the clear")
	}
}

// get (for the tests) returns the value of key (a, b) and whether it is there.
func (x *index[V]) get(a, b uint64) (V, bool) {
	if x.n > 0 {
		mask := uint64(len(x.slots) - 1)
		for i := mix(a, b) & mask; ; i = (i + 1) & mask {
			s := &x.slots[i]
			if s.gen != x.gen {
				break
			}
			if s.a == a && s.b == b {
				return s.v, true
			}
		}
	}
	var zero V
	return zero, false
}

// len (for the tests) is the number of keys there.
func (x *index[V]) len() int { return x.n }
