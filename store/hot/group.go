package hot

import (
	"math/bits"
	"slices"
)

// subBits is how many time buckets a group spans: 256 buckets of id >> 32, so a group is
// id >> 40 (2^18 ms, about 4.4 minutes of snowflake ids).
const subBits = 8

// group is the sealed form of the 256 time buckets sharing id >> 40: their entries in one
// dense array sorted by bucket then suffix, with no empty slots. A bucket's own index
// (id >> 32 & 255) is not stored per entry: the group records where each bucket's run
// starts, in about 1.2 bytes a bucket (a byte count per bucket and a 16-bit start every
// 16 buckets) instead of a byte an id. Sealed buckets are why sparse ids (a few
// a second) still cost about 12.5 bytes an id: a hash table per second would hold only a
// handful of them next to its fixed overhead.
//
// A group of 64 ids a bucket or more on average (or whose runs do not fit bytes) keeps a
// fence instead: the start of every slice of 2^shift keys of its 40-bit key space
// (bucket << 32 | suffix), 32 to 64 ids a slice, 4 bytes each (0.125 bytes an id at
// most). Ids arrive at random times, so a key's place in its second deviates from an even
// spread by about the square root of the ids before it: interpolating over a whole
// second of 3 000 ids lands some 25 entries away, after reading the run's first and last
// keys, where interpolating inside a slice, whose two starts sit together, lands on the
// entry or a neighbour a few entries off, in the same or the next cache line.
//
// An entry whose counters all become zero stays in place, dead, so the array stays sorted
// and the id can come back without moving anything; dead entries are dropped when the
// group is next merged.
type group struct {
	words []uint32 // entries, stride words each: suffix, then counters as in a bucket
	// Runs of a group of fewer than 2*fenceFrom entries a bucket on average, none longer
	// than 255: cnt is each bucket's run length and base the start of every 16th run.
	// Otherwise fence holds the start of every slice of 2^shift keys and one past the
	// end; either way the other is nil.
	cnt   []uint8
	base  []uint16
	fence []uint32
	// openSubs has a bit for each bucket of the group in its open (hash) form, so that a
	// lookup in a sealed bucket asks the bucket map only when the bucket is open.
	openSubs [4]uint64
	// opened holds the open buckets by index once the group has openedFrom of them (the
	// group being written has up to 256), so that a lookup finds its bucket without the
	// table's map; a group with a few late ids keeps the map's cost, not 2 KiB.
	opened *[1 << subBits]*bucket
	stride int32
	live   int32
	dead   int32
	late   int32    // ids inserted into open buckets since the group was sealed
	dirty  []uint64 // one bit per entry, nil while clean
	ov     overflow // escaped counters by sub<<40 | suffix<<8 | field
	// touched is the table's tick when an id of the group was last read or written.
	touched uint32
	shift   uint8 // of the fence: a slice is 2^shift keys
	acct    int   // its bytes as the table's total counts them (see MemBytes)
}

func gOvKey(sub uint8, suffix uint32, f int) uint64 {
	return uint64(sub)<<40 | uint64(suffix)<<8 | uint64(f)
}

func (g *group) size() int {
	if g.stride == 0 {
		return 0
	}
	return len(g.words) / int(g.stride)
}

func (g *group) isOpen(sub uint8) bool { return g.openSubs[sub>>6]&(1<<(sub&63)) != 0 }

func (g *group) setOpen(sub uint8, open bool) {
	if open {
		g.openSubs[sub>>6] |= 1 << (sub & 63)
	} else {
		g.openSubs[sub>>6] &^= 1 << (sub & 63)
	}
}

// openedFrom is how many open buckets a group has before it indexes them in opened.
const openedFrom = 16

func (g *group) openCount() int {
	n := 0
	for _, w := range g.openSubs {
		n += bits.OnesCount64(w)
	}
	return n
}

// hasOpen reports whether any bucket of the group is open.
func (g *group) hasOpen() bool { return g.openSubs != [4]uint64{} }

// bounds returns bucket sub's run of entries.
func (g *group) bounds(sub uint8) (lo, hi int) {
	switch {
	case g.cnt != nil:
		q := int(sub) >> 4
		lo = int(g.base[q])
		for _, c := range g.cnt[q<<4 : sub] {
			lo += int(c)
		}
		return lo, lo + int(g.cnt[sub])
	case g.fence != nil:
		per := 32 - uint(g.shift) // log2 of slices a bucket
		return int(g.fence[int(sub)<<per]), int(g.fence[(int(sub)+1)<<per])
	}
	return 0, 0
}

// runEnd is where bucket sub's run ends, given start, where it starts (the end of the
// run before): bounds without summing a block of run lengths, for a walk in order.
func (g *group) runEnd(sub uint8, start int) int {
	if g.cnt != nil {
		return start + int(g.cnt[sub])
	}
	_, hi := g.bounds(sub)
	return hi
}

// find returns the entry of key in bucket sub, live or dead, or -1. Keys are spread
// evenly enough over a run (a bucket, or a fence slice) that interpolating with the
// run's key range — known without reading a key — lands on the entry or a few entries
// from it, and a short scan from there stays in the same or the next cache line (which
// the CPU prefetches). Skewed keys that the scan does not reach fall back to bisection.
func (g *group) find(sub uint8, key uint32) int {
	const reach = 8
	var lo, hi int
	var rel uint64 // key's offset in the run's key range, of 2^bits
	bits := uint(32)
	if g.fence != nil {
		k := uint64(sub)<<32 | uint64(key)
		bits = uint(g.shift)
		j := int(k >> bits)
		fe := g.fence[j : j+2]
		lo, hi, rel = int(fe[0]), int(fe[1]), k&(1<<bits-1)
	} else {
		lo, hi = g.bounds(sub)
		rel = uint64(key)
	}
	if lo >= hi {
		return -1
	}
	st := int(g.stride)
	ws := g.words[lo*st : hi*st]
	n := hi - lo
	m := int(rel * uint64(n) >> bits) // < n
	k := ws[m*st]
	if k == key {
		return lo + m
	}
	a, b := 0, n
	if k < key {
		a = m + 1
		for j := a; j < n && j <= m+reach; j++ {
			if k := ws[j*st]; k >= key {
				if k == key {
					return lo + j
				}
				return -1
			}
			a = j + 1
		}
	} else {
		b = m
		for j := m - 1; j >= 0 && j >= m-reach; j-- {
			if k := ws[j*st]; k <= key {
				if k == key {
					return lo + j
				}
				return -1
			}
			b = j
		}
	}
	for a < b {
		h := int(uint(a+b) >> 1)
		switch k := ws[h*st]; {
		case k == key:
			return lo + h
		case k < key:
			a = h + 1
		default:
			b = h
		}
	}
	return -1
}

func (g *group) key(i int) uint32 { return g.words[i*int(g.stride)] }

func (g *group) count(i, f int) uint16 { return getCount(g.words[i*int(g.stride)+1:], f) }

// counters returns entry i's counter words.
func (g *group) counters(i int) []uint32 {
	st := int(g.stride)
	return g.words[i*st+1 : (i+1)*st]
}

func (g *group) isZero(i int) bool { return isZeroWords(g.counters(i)) }

func isZeroWords(ws []uint32) bool {
	for _, w := range ws {
		if w != 0 {
			return false
		}
	}
	return true
}

func (g *group) markDirty(i int) {
	if g.dirty == nil {
		g.dirty = make([]uint64, (g.size()+63)/64)
	}
	g.dirty[i/64] |= 1 << (i % 64)
}

func (g *group) isDirty(i int) bool {
	return g.dirty != nil && g.dirty[i/64]&(1<<(i%64)) != 0
}

// remeasure sets acct to the group's bytes and returns by how much it changed.
func (g *group) remeasure() int {
	n := g.bytes()
	d := n - g.acct
	g.acct = n
	return d
}

func (g *group) bytes() int {
	const header = 256 // struct, slice headers, the group map entry
	n := header + 4*cap(g.words) + cap(g.cnt) + 2*cap(g.base) + 4*cap(g.fence) + 8*cap(g.dirty) + g.ov.bytes()
	if g.opened != nil {
		n += 8 << subBits
	}
	return n
}

// merge seals group gk: its live sealed entries and the entries of its open buckets are
// written, sorted, into new dense arrays, and the open buckets are freed. It touches only
// this group's ids, so the pause is bounded by one group, not the table.
func (t *Table) merge(gk uint32) {
	g := t.groups[gk]
	if g == nil {
		return
	}
	total := int(g.live)
	for sub := range 1 << subBits {
		if g.isOpen(uint8(sub)) {
			total += t.buckets[gk<<subBits|uint32(sub)].used
		}
	}
	st := strideOf(t.fields)
	ng := &group{words: make([]uint32, total*st), stride: int32(st), live: int32(total)}
	off := make([]uint32, 1<<subBits+1) // run starts, packed below if they fit
	dirty := false
	n := 0
	// emit copies one entry's words into the new array, with its escaped values, which
	// src keeps at ovBase | field.
	emit := func(sub uint8, src []uint32, ov *overflow, ovBase uint64, isDirty bool) {
		d := ng.words[n*st : (n+1)*st]
		copy(d, src)
		for f := range t.fields {
			if getCount(d[1:], f) == escape {
				// Appended in (sub, suffix, field) order, so the list stays sorted.
				ng.ov.keys = append(ng.ov.keys, gOvKey(sub, d[0], f))
				ng.ov.vals = append(ng.ov.vals, ov.get(ovBase|uint64(f)))
			}
		}
		if isDirty {
			if !dirty {
				ng.dirty, dirty = make([]uint64, (total+63)/64), true
			}
			ng.dirty[n/64] |= 1 << (n % 64)
		}
		n++
	}
	scratch := t.scratch[:0]
	for s := range 1 << subBits {
		sub := uint8(s)
		off[s] = uint32(n)
		lo, hi := g.bounds(sub)
		bk := gk<<subBits | uint32(s)
		var b *bucket
		scratch = scratch[:0]
		if g.isOpen(sub) {
			b = t.buckets[bk]
			for slot := range b.size() {
				if !b.isZero(slot) {
					scratch = append(scratch, uint64(b.key(slot))<<32|uint64(slot))
				}
			}
			slices.Sort(scratch)
			t.forgetBucket(bk)
		}
		j := 0
		for i := lo; i < hi || j < len(scratch); {
			// Sealed and open entries of one id never coexist, so keys never tie.
			if i < hi && (j == len(scratch) || g.key(i) < uint32(scratch[j]>>32)) {
				if !g.isZero(i) {
					emit(sub, g.words[i*st:(i+1)*st], &g.ov, gOvKey(sub, g.key(i), 0), g.isDirty(i))
				}
				i++
				continue
			}
			slot := int(uint32(scratch[j]))
			emit(sub, b.words[slot*st:(slot+1)*st], &b.ov, uint64(b.key(slot))<<8, b.isDirty(slot))
			j++
		}
	}
	off[1<<subBits] = uint32(n)
	ng.setRuns(off)
	if len(ng.ov.keys) == 0 {
		ng.ov = overflow{}
	} else if cap(ng.ov.keys) > len(ng.ov.keys) { // appended: trim the growth slack
		ng.ov = overflow{keys: slices.Clone(ng.ov.keys), vals: slices.Clone(ng.ov.vals)}
	}
	t.scratch = scratch
	t.last = nil
	if total == 0 {
		t.delGroup(gk)
		return
	}
	ng.touched, ng.acct = g.touched, g.acct
	*g = *ng // in place, so cached pointers stay valid
	t.remeasure(nil, []uint32{gk})
	// Marks carried from its open buckets were listed by their keys: list the group's.
	if g.dirty != nil {
		t.dirtyGroups = append(t.dirtyGroups, gk)
	}
}

// setRuns indexes the entries by their buckets' run starts off (257 of them): with
// counts in bytes when the group is small and sparse, else with a fence.
func (g *group) setRuns(off []uint32) {
	n := off[len(off)-1]
	small := n < 1<<16 && n < 2*fenceFrom<<subBits // else a fence has 512 slices or more
	for s := range len(off) - 1 {
		small = small && off[s+1]-off[s] <= 255
	}
	g.cnt, g.base, g.fence, g.shift = nil, nil, nil, 0
	if !small {
		g.setFence(off)
		return
	}
	g.cnt = make([]uint8, len(off)-1)
	g.base = make([]uint16, (len(off)-1)/16)
	for s := range g.cnt {
		g.cnt[s] = uint8(off[s+1] - off[s])
		if s%16 == 0 {
			g.base[s/16] = uint16(off[s])
		}
	}
}

// fenceFrom is the mean entries a fence slice holds at least: a lookup scans about the
// deviation of a slice's keys from even spacing, within a cache line or two, and the
// fence costs 4/fenceFrom bytes an id at most.
const fenceFrom = 32

// setFence builds the fence from the run starts off: slices of 2^shift keys, as many as
// keep fenceFrom entries a slice on average and at least one a bucket (shift 32).
func (g *group) setFence(off []uint32) {
	n := uint64(off[len(off)-1])
	shift := uint(32)
	for shift > 8 && n>>(40-shift+1) >= fenceFrom {
		shift--
	}
	slices := 1 << (40 - shift)
	fence := make([]uint32, slices+1)
	j := 0
	for s := range len(off) - 1 {
		for i := off[s]; i < off[s+1]; i++ {
			for sj := int((uint64(s)<<32 | uint64(g.key(int(i)))) >> shift); j <= sj; j++ {
				fence[j] = i
			}
		}
	}
	for ; j <= slices; j++ {
		fence[j] = uint32(n)
	}
	g.fence, g.shift = fence, uint8(shift)
}

// runStarts returns the start of every bucket's run and one past the end.
func (g *group) runStarts() []uint32 {
	off := make([]uint32, 1<<subBits+1)
	for s := range 1 << subBits {
		lo, _ := g.bounds(uint8(s))
		off[s] = uint32(lo)
	}
	off[1<<subBits] = uint32(g.size())
	return off
}
