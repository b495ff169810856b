package hot

// Get copies id's counters into dst and reports whether id is stored.
//
// Random lookups of a large table each wait on a cache miss (and a TLB miss), and the CPU
// overlaps them only as far as its reorder window holds the instructions that follow:
// every instruction on the path, a call's spills and frame among them, costs about as
// much as a cache hit would. So the common case — a sealed group with a fence, up to four
// counters a slot (stride 3), none escaped — is searched and copied here in one function
// with constant strides; anything else takes getSlow. The search is group.find's for a
// fence (TestGroupFind checks that one, the model tests both).
func (t *Table) Get(id uint64, dst []uint64) bool {
	const st, reach = 3, 8
	g := t.group(uint32(id >> 40))
	sub, key := uint8(id>>32), uint32(id)
	if g == nil || g.stride != st {
		return t.getSlow(id, dst)
	}
	if g.isOpen(sub) {
		if g.opened == nil {
			return t.getSlow(id, dst)
		}
		if b := g.opened[sub]; b != nil {
			if s := b.find(key); s >= 0 {
				g.touched = t.tick
				if unpack(dst, word(b.words, s)) { // live: a bucket holds no dead entry
					return true
				}
				return t.getSlow(id, dst)
			}
		}
	}
	if g.fence == nil {
		return t.getSlow(id, dst)
	}
	g.touched = t.tick
	k := id & (1<<40 - 1)
	bits := uint(g.shift)
	j := int(k >> bits)
	fe := g.fence[j : j+2]
	lo, hi := int(fe[0]), int(fe[1])
	ws := g.words[lo*st : hi*st]
	n := hi - lo
	i := -1 // id's place in ws; -2 when the scan did not reach it
	if n > 0 {
		m := int((k & (1<<bits - 1)) * uint64(n) >> bits)
		switch km := ws[m*st]; {
		case km == key:
			i = m
		case km < key:
			i = -2
			for j := m + 1; j < n && j <= m+reach; j++ {
				if kj := ws[j*st]; kj >= key {
					i = j | -b2i(kj != key)
					break
				}
			}
			if i == -2 && (m+reach >= n-1) {
				i = -1 // scanned to the end
			}
		default:
			i = -2
			for j := m - 1; j >= 0 && j >= m-reach; j-- {
				if kj := ws[j*st]; kj <= key {
					i = j | -b2i(kj != key)
					break
				}
			}
			if i == -2 && m-reach <= 0 {
				i = -1
			}
		}
	}
	switch {
	case i == -1:
		clear(dst)
		return false
	case i < 0:
		return t.getSlow(id, dst)
	}
	switch v := word(ws, i); {
	case v == 0: // a dead entry
		clear(dst)
		return false
	case unpack(dst, v):
		return true
	}
	return t.getSlow(id, dst)
}

// unpack copies the counters of an entry of stride 3, read as one word v, into dst
// (three or four of them), small enough to inline; it reports false, dst untouched,
// when a counter is escaped or dst is of another size, which Get leaves to getSlow.
func unpack(dst []uint64, v uint64) bool {
	if x := ^v; (x-0x0001_0001_0001_0001)&^x&0x8000_8000_8000_8000 != 0 || uint(len(dst))-3 > 1 {
		return false
	}
	dst[0], dst[1], dst[2] = v&0xFFFF, v>>16&0xFFFF, v>>32&0xFFFF
	if len(dst) == 4 {
		dst[3] = v >> 48
	}
	return true
}

// word is the counters of entry i (of stride 3) in ws as one word.
func word(ws []uint32, i int) uint64 { return uint64(ws[i*3+1]) | uint64(ws[i*3+2])<<32 }

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// getSlow is Get for every case.
func (t *Table) getSlow(id uint64, dst []uint64) bool {
	g, b, i := t.find(id)
	if i < 0 {
		clear(dst)
		return false
	}
	w := counters(g, b, i)
	if b == nil && isZeroWords(w) {
		clear(dst)
		return false
	}
	for f := range dst {
		c := getCount(w, f)
		if c == escape {
			dst[f] = t.value(g, b, i, id, f)
			continue
		}
		dst[f] = uint64(c)
	}
	return true
}
