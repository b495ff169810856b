package hot

import "slices"

// escape in a counter column means the value is in an overflow list.
const escape = 0xFFFF

// bucket is the open, still-growing form of one time bucket (id >> 32): an
// open-addressing table of 32-bit id suffixes with double hashing over a power-of-two
// number of slots. A slot is used when one of its counters is non-zero (an all-zero
// entry is never stored), empty when its counters and key are zero, and a tombstone (a
// deleted entry that a later insert reuses) when its counters are zero and its key is
// not. So key 0 needs no reserved value: an empty slot and a used slot holding suffix 0
// differ by their counters.
type bucket struct {
	// words holds the slots, stride words each: the id suffix, then the 16-bit counters
	// two to a word. Key and counters share a cache line, so a probe costs one miss.
	words  []uint32
	stride int
	mask   int // size-1
	used   int
	tombs  int
	dirty  []uint64 // one bit per slot, nil while the bucket is clean
	ov     overflow // escaped counters by suffix<<8 | field
	acct   int      // its bytes as the table's total counts them (see MemBytes)
}

// strideOf is the words a slot of fields counters takes.
func strideOf(fields int) int { return 1 + (fields+1)/2 }

func newBucket(size, fields int) *bucket {
	st := strideOf(fields)
	return &bucket{words: make([]uint32, size*st), stride: st, mask: size - 1}
}

func (b *bucket) size() int { return b.mask + 1 }

func (b *bucket) key(slot int) uint32         { return b.words[slot*b.stride] }
func (b *bucket) setKey(slot int, key uint32) { b.words[slot*b.stride] = key }

func (b *bucket) count(slot, f int) uint16 { return getCount(b.words[slot*b.stride+1:], f) }

func getCount(w []uint32, f int) uint16 { return uint16(w[f/2] >> (16 * (f & 1))) }

func putCount(w []uint32, f int, v uint16) {
	shift := 16 * (f & 1)
	w[f/2] = w[f/2]&^(0xFFFF<<shift) | uint32(v)<<shift
}

func (b *bucket) isZero(slot int) bool {
	for _, w := range b.words[slot*b.stride+1 : (slot+1)*b.stride] {
		if w != 0 {
			return false
		}
	}
	return true
}

// probe returns the first slot and the step of key's probe sequence. The size is a power
// of two and the step odd, so the sequence visits every slot.
func probe(key uint32, mask int) (pos, step int) {
	h := uint64(key) * 0x9E3779B97F4A7C15
	return int(h>>32) & mask, int(uint32(h)>>7) | 1
}

// find returns the slot holding key, or -1. The counters are read only when the key
// matches or may mark an empty slot (key 0).
func (b *bucket) find(key uint32) int {
	pos, step := probe(key, b.mask)
	for range b.size() {
		switch k := b.key(pos); {
		case k == key:
			if !b.isZero(pos) {
				return pos
			}
			if k == 0 {
				return -1 // empty
			}
		case k == 0:
			if b.isZero(pos) {
				return -1 // empty: key is not here
			}
		}
		pos = (pos + step) & b.mask
	}
	return -1
}

// insertSlot returns the slot where key should go: the first tombstone on its probe
// sequence, or the empty slot that ends it. The caller has checked key is absent and
// that there is room.
func (b *bucket) insertSlot(key uint32) int {
	pos, step := probe(key, b.mask)
	for range b.size() {
		if b.isZero(pos) { // empty or tombstone
			return pos
		}
		pos = (pos + step) & b.mask
	}
	panic("hot: bucket full") // unreachable: the load limit keeps free slots
}

func (b *bucket) markDirty(slot int) {
	if b.dirty == nil {
		b.dirty = make([]uint64, (b.size()+63)/64)
	}
	b.dirty[slot/64] |= 1 << (slot % 64)
}

func (b *bucket) isDirty(slot int) bool {
	return b.dirty != nil && b.dirty[slot/64]&(1<<(slot%64)) != 0
}

// bytes is the bucket's RAM.
// remeasure sets acct to the bucket's bytes and returns by how much it changed.
func (b *bucket) remeasure() int {
	n := b.bytes()
	d := n - b.acct
	b.acct = n
	return d
}

func (b *bucket) bytes() int {
	const header = 144 // struct, slice headers, the bucket index entry
	return header + 4*cap(b.words) + 8*cap(b.dirty) + b.ov.bytes()
}

// overflow holds the exact values of escaped counters, sorted by key: they are rare, so
// a sorted pair of slices costs 16 bytes a value where a map would cost 30 or more.
type overflow struct {
	keys []uint64
	vals []uint64
}

func (o *overflow) get(k uint64) uint64 {
	if i, ok := slices.BinarySearch(o.keys, k); ok {
		return o.vals[i]
	}
	return 0
}

func (o *overflow) set(k, v uint64) {
	i, ok := slices.BinarySearch(o.keys, k)
	if ok {
		o.vals[i] = v
		return
	}
	o.keys = slices.Insert(o.keys, i, k)
	o.vals = slices.Insert(o.vals, i, v)
}

func (o *overflow) del(k uint64) {
	if i, ok := slices.BinarySearch(o.keys, k); ok {
		o.keys = slices.Delete(o.keys, i, i+1)
		o.vals = slices.Delete(o.vals, i, i+1)
	}
}

func (o *overflow) bytes() int { return 8*cap(o.keys) + 8*cap(o.vals) }
