package event

// index maps a key of two words to a value: what a coalescer finds, for each change of
// a transaction, the place of the counter's earlier changes by. A Go map hashed every
// key with the runtime's general hash and cleared its whole room at each transaction's
// end, about half of what a change cost (BenchmarkCoalescer); this one mixes the two
// words with two multiplications, probes linearly, and is emptied by a generation
// number, in constant time. Not safe for concurrent use.
type index[V any] struct {
	slots []slot[V] // a power of two long, at most three quarters used
	gen   uint32    // the slots of another generation are empty; 0 never is one
	n     int
}

type slot[V any] struct {
	a, b uint64
	gen  uint32
	v    V
}

// minIndex is the room an index first takes.
const minIndex = 64

// ref returns where the value of key (a, b) is and whether it was there: a key not
// there is added, with the zero value. The pointer is good until the next ref.
func (x *index[V]) ref(a, b uint64) (*V, bool) {
	if x.gen == 0 {
		x.gen = 1
	}
	if (x.n+1)*4 > len(x.slots)*3 {
		x.grow()
	}
	mask := uint64(len(x.slots) - 1)
	for i := mix(a, b) & mask; ; i = (i + 1) & mask {
		s := &x.slots[i]
		if s.gen != x.gen {
			*s = slot[V]{a: a, b: b, gen: x.gen}
			x.n++
			return &s.v, false
		}
		if s.a == a && s.b == b {
			return &s.v, true
		}
	}
}

// clear empties the index and keeps its room.
func (x *index[V]) clear() {
	x.n = 0
	if x.gen++; x.gen == 0 { // wrapped: a slot may hold any older generation
		clear(x.slots)
		x.gen = 1
	}
}

func (x *index[V]) grow() {
	old := x.slots
	x.slots = make([]slot[V], max(minIndex, 2*len(old)))
	mask := uint64(len(x.slots) - 1)
	for _, s := range old {
		if s.gen != x.gen {
			continue
		}
		i := mix(s.a, s.b) & mask
		for x.slots[i].gen == x.gen {
			i = (i + 1) & mask
		}
		x.slots[i] = s
	}
}

// mix hashes two words into one whose low bits spread keys that differ in any bit.
func mix(a, b uint64) uint64 {
	h := a*0x9E3779B97F4A7C15 ^ b
	h ^= h >> 32
	h *= 0xD6E8FEB86659FD93
	h ^= h >> 32
	return h
}
