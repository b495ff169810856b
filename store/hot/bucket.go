package hot

import "slices"

// escape in a counter column means the value is in the overflow map.
const escape = 0xFFFF

// bucket is one time bucket: an open-addressing table of 32-bit id suffixes. A slot is
// used when one of its counters is non-zero (an all-zero entry is never stored), empty
// when its counters and key are zero, and a tombstone (a deleted entry that a later
// insert reuses) when its counters are zero and its key is not.
type bucket struct {
	// words holds the slots, stride words each: the id suffix, then the 16-bit counters
	// two to a word. Key and counters share a cache line, so a probe costs one miss.
	words  []uint32
	stride int
	used   int
	tombs  int
	packed bool     // sized to CompactLoad in a slab; growing it moves it out
	dirty  []uint64 // one bit per slot, nil while the bucket is clean
	// Escaped counters' exact values, sorted by suffix<<8 | field: rare, so a sorted
	// pair of slices costs 16 bytes an entry where a map would cost 30 or more.
	ovKeys []uint64
	ovVals []uint64
}

func ovKey(suffix uint32, f int) uint64 { return uint64(suffix)<<8 | uint64(f) }

func (b *bucket) ovGet(suffix uint32, f int) uint64 {
	if i, ok := slices.BinarySearch(b.ovKeys, ovKey(suffix, f)); ok {
		return b.ovVals[i]
	}
	return 0
}

func (b *bucket) ovSet(suffix uint32, f int, v uint64) {
	k := ovKey(suffix, f)
	i, ok := slices.BinarySearch(b.ovKeys, k)
	if ok {
		b.ovVals[i] = v
		return
	}
	b.ovKeys = slices.Insert(b.ovKeys, i, k)
	b.ovVals = slices.Insert(b.ovVals, i, v)
}

func (b *bucket) ovDelete(suffix uint32, f int) {
	if i, ok := slices.BinarySearch(b.ovKeys, ovKey(suffix, f)); ok {
		b.ovKeys = slices.Delete(b.ovKeys, i, i+1)
		b.ovVals = slices.Delete(b.ovVals, i, i+1)
	}
}

// strideOf is the words a slot of fields counters takes.
func strideOf(fields int) int { return 1 + (fields+1)/2 }

func newBucket(size, fields int) *bucket {
	st := strideOf(fields)
	return &bucket{words: make([]uint32, size*st), stride: st}
}

func (b *bucket) size() int { return len(b.words) / b.stride }

func (b *bucket) key(slot int) uint32         { return b.words[slot*b.stride] }
func (b *bucket) setKey(slot int, key uint32) { b.words[slot*b.stride] = key }

func (b *bucket) count(slot, f int) uint16 {
	return uint16(b.words[slot*b.stride+1+f/2] >> (16 * (f & 1)))
}

func (b *bucket) setCount(slot, f int, v uint16) {
	w := &b.words[slot*b.stride+1+f/2]
	shift := 16 * (f & 1)
	*w = *w&^(0xFFFF<<shift) | uint32(v)<<shift
}

// copySlot copies slot s of src into slot d of b.
func (b *bucket) copySlot(d int, src *bucket, s int) {
	copy(b.words[d*b.stride:(d+1)*b.stride], src.words[s*src.stride:(s+1)*src.stride])
}

// probe returns the first slot and the step of key's probe sequence. With a prime size
// every step in [1, size-1] visits every slot.
func probe(key uint32, size int) (pos, step int) {
	h := uint64(key) * 0x9E3779B97F4A7C15
	hi, lo := uint32(h>>32), uint32(h)
	pos = int((uint64(hi) * uint64(size)) >> 32)
	step = 1 + int((uint64(lo)*uint64(size-1))>>32)
	return pos, step
}

func (b *bucket) isZero(slot, _ int) bool {
	for _, w := range b.words[slot*b.stride+1 : (slot+1)*b.stride] {
		if w != 0 {
			return false
		}
	}
	return true
}

// find returns the slot holding key, or -1. The counters, a second cache line, are read
// only when the key matches or may mark an empty slot (key 0): a tombstone's key is 1
// and any other key is a used slot.
func (b *bucket) find(key uint32, fields int) int {
	size := b.size()
	pos, step := probe(key, size)
	for range size {
		switch k := b.key(pos); {
		case k == key:
			if !b.isZero(pos, fields) {
				return pos
			}
			if k == 0 {
				return -1 // empty
			}
		case k == 0:
			if b.isZero(pos, fields) {
				return -1 // empty: key is not here
			}
		}
		if pos += step; pos >= size {
			pos -= size
		}
	}
	return -1
}

// insertSlot returns the slot where key should go: the first tombstone on its probe
// sequence, or the empty slot that ends it. The caller has checked key is absent and
// that there is room.
func (b *bucket) insertSlot(key uint32, fields int) int {
	size := b.size()
	pos, step := probe(key, size)
	for range size {
		if b.key(pos) <= 1 && b.isZero(pos, fields) { // empty (0) or tombstone (1)
			return pos
		}
		if pos += step; pos >= size {
			pos -= size
		}
	}
	panic("hot: bucket full") // unreachable: the load limit keeps empty slots
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

// nextPrime returns the smallest prime ≥ n (n small enough for trial division to be
// cheap next to the rehash it sizes).
func nextPrime(n int) int {
	if n <= 2 {
		return 2
	}
	if n%2 == 0 {
		n++
	}
	for ; ; n += 2 {
		prime := true
		for d := 3; d*d <= n; d += 2 {
			if n%d == 0 {
				prime = false
				break
			}
		}
		if prime {
			return n
		}
	}
}

// bytes is the bucket's RAM.
func (b *bucket) bytes() int {
	const header = 128 // struct, slice headers, the bucket index entry
	return header + 4*cap(b.words) + 8*cap(b.dirty) + 8*cap(b.ovKeys) + 8*cap(b.ovVals)
}
