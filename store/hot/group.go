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
// An entry whose counters all become zero stays in place, dead, so the array stays sorted
// and the id can come back without moving anything; dead entries are dropped when the
// group is next merged.
type group struct {
	words []uint32 // entries, stride words each: suffix, then counters as in a bucket
	// Runs of a group of fewer than 1<<16 entries, none longer than 255: cnt is each
	// bucket's run length and base the start of every 16th run. Otherwise off32 holds
	// all 257 starts; either way the other is nil.
	cnt   []uint8
	base  []uint16
	off32 []uint32
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
	case g.off32 != nil:
		return int(g.off32[sub]), int(g.off32[int(sub)+1])
	}
	return 0, 0
}

func (g *group) key(i int) uint32 { return g.words[i*int(g.stride)] }

func (g *group) count(i, f int) uint16 { return getCount(g.words[i*int(g.stride)+1:], f) }

// counters returns entry i's counter words.
func (g *group) counters(i int) []uint32 {
	st := int(g.stride)
	return g.words[i*st+1 : (i+1)*st]
}

func (g *group) isZero(i int) bool {
	for _, w := range g.counters(i) {
		if w != 0 {
			return false
		}
	}
	return true
}

// find returns the entry of key in bucket sub, live or dead, or -1. Snowflake suffixes
// are spread evenly over their second, so one interpolation lands a few entries from the
// key, and a short scan from there reads neighbouring cache lines (which the CPU
// prefetches) where bisection would miss the cache at every step. Skewed ids that the
// scan does not reach fall back to bisection.
func (g *group) find(sub uint8, key uint32) int {
	const reach = 32
	lo, hi := g.bounds(sub)
	if hi-lo > 8 {
		a, b := g.key(lo), g.key(hi-1)
		if key < a || key > b {
			return -1
		}
		m := lo + int(uint64(key-a)*uint64(hi-1-lo)/uint64(b-a))
		switch k := g.key(m); {
		case k == key:
			return m
		case k < key:
			j := m + 1
			for ; j < hi && j <= m+reach; j++ {
				if k := g.key(j); k >= key {
					if k == key {
						return j
					}
					return -1
				}
			}
			lo = j
		default:
			j := m - 1
			for ; j >= lo && j >= m-reach; j-- {
				if k := g.key(j); k <= key {
					if k == key {
						return j
					}
					return -1
				}
			}
			hi = j + 1
		}
	}
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		switch k := g.key(m); {
		case k == key:
			return m
		case k < key:
			lo = m + 1
		default:
			hi = m
		}
	}
	return -1
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

func (g *group) bytes() int {
	const header = 256 // struct, slice headers, the group map entry
	n := header + 4*cap(g.words) + cap(g.cnt) + 2*cap(g.base) + 4*cap(g.off32) + 8*cap(g.dirty) + g.ov.bytes()
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
			delete(t.buckets, bk)
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
	ng.touched = g.touched
	*g = *ng // in place, so cached pointers stay valid
}

// setRuns stores the run starts off in the smaller form they fit.
func (g *group) setRuns(off []uint32) {
	small := off[len(off)-1] < 1<<16
	for s := range len(off) - 1 {
		small = small && off[s+1]-off[s] <= 255
	}
	if !small {
		g.off32 = off
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
