package hot

import (
	"cmp"
	"math/bits"
	"slices"
)

// Compact seals every group: open buckets and dead entries are merged into the groups'
// dense arrays. Older groups are sealed as time moves on; Compact also seals the newest
// (before a snapshot, or when ids do not arrive in time order).
func (t *Table) Compact() {
	gks := make([]uint32, 0, len(t.groups))
	for gk, g := range t.groups {
		if g.hasOpen() || g.dead > 0 {
			gks = append(gks, gk)
		}
	}
	for _, gk := range gks {
		t.merge(gk)
	}
}

// Range calls fn for every id with its counters until fn returns false.
func (t *Table) Range(fn func(id uint64, counts []uint64) bool) {
	for _, bk := range t.Buckets() {
		if !t.RangeBucket(bk, fn) {
			return
		}
	}
}

// Buckets returns the time buckets (id >> 32) that hold ids, in order.
func (t *Table) Buckets() []uint32 {
	var out []uint32
	for bk, b := range t.buckets {
		if b.used > 0 {
			out = append(out, bk)
		}
	}
	for gk, g := range t.groups {
		for s := range 1 << subBits {
			lo, hi := g.bounds(uint8(s))
			for i := lo; i < hi; i++ {
				if !g.isZero(i) {
					out = append(out, gk<<subBits|uint32(s))
					break
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// RangeBucket calls fn for every id of one time bucket, in no particular order, and
// reports false if fn stopped it. counts is only valid during the call.
func (t *Table) RangeBucket(bk uint32, fn func(id uint64, counts []uint64) bool) bool {
	counts := make([]uint64, t.fields)
	if b := t.buckets[bk]; b != nil {
		for s := range b.size() {
			if b.isZero(s) {
				continue
			}
			id := uint64(bk)<<32 | uint64(b.key(s))
			for f := range counts {
				counts[f] = t.value(nil, b, s, id, f)
			}
			if !fn(id, counts) {
				return false
			}
		}
	}
	if g := t.groups[bk>>subBits]; g != nil {
		lo, hi := g.bounds(uint8(bk))
		for i := lo; i < hi; i++ {
			if g.isZero(i) {
				continue
			}
			id := uint64(bk)<<32 | uint64(g.key(i))
			for f := range counts {
				counts[f] = t.value(g, nil, i, id, f)
			}
			if !fn(id, counts) {
				return false
			}
		}
	}
	return true
}

// DropBucket removes a whole time bucket (after it was moved to the cold tier). Its ids
// are not reported by Dirty as deleted: the cold tier holds them now.
func (t *Table) DropBucket(bk uint32) {
	gk := bk >> subBits
	g := t.groups[gk]
	if g == nil {
		return
	}
	if b := t.buckets[bk]; b != nil {
		t.n -= b.used
		t.dropBucket(g, bk)
	}
	lo, hi := g.bounds(uint8(bk))
	for i := lo; i < hi; i++ {
		if g.isZero(i) {
			continue
		}
		for f := range t.fields {
			if g.count(i, f) == escape {
				g.ov.del(gOvKey(uint8(bk), g.key(i), f))
			}
		}
		clear(g.counters(i))
		if g.dirty != nil {
			g.dirty[i/64] &^= 1 << (i % 64)
		}
		g.live--
		g.dead++
		t.n--
	}
	t.deleted = slices.DeleteFunc(t.deleted, func(id uint64) bool { return uint32(id>>32) == bk })
	if g.dead > g.live/4+16 || (g.live == 0 && !g.hasOpen()) {
		t.merge(gk)
	}
}

// Dirty calls fn for every id changed since ClearDirty with its counters; a deleted id
// comes with all zeros (a checkpoint must delete it too). It stops when fn returns false.
// The table must not be modified during Dirty.
func (t *Table) Dirty(fn func(id uint64, counts []uint64) bool) {
	counts := make([]uint64, t.fields)
	slices.Sort(t.deleted)
	t.deleted = slices.Compact(t.deleted) // an id deleted twice is reported once
	for _, id := range t.deleted {
		if !t.Get(id, counts) && !fn(id, counts) { // re-inserted ids are reported below
			return
		}
	}
	t.dirtyBuckets, t.dirtyGroups = sortedOnce(t.dirtyBuckets), sortedOnce(t.dirtyGroups)
	for _, bk := range t.dirtyBuckets {
		b := t.buckets[bk]
		if b == nil {
			continue // merged into its group, or dropped
		}
		if !eachSet(b.dirty, func(s int) bool {
			if b.isZero(s) {
				return true
			}
			id := uint64(bk)<<32 | uint64(b.key(s))
			for f := range counts {
				counts[f] = t.value(nil, b, s, id, f)
			}
			return fn(id, counts)
		}) {
			return
		}
	}
	for _, gk := range t.dirtyGroups {
		g := t.groups[gk]
		if g == nil {
			continue // dropped
		}
		// Entries are in bucket order: the bucket of each follows from the runs' bounds.
		sub, hi := -1, 0
		if !eachSet(g.dirty, func(i int) bool {
			for i >= hi && sub < 1<<subBits-1 {
				sub++
				hi = g.runEnd(uint8(sub), hi)
			}
			if g.isZero(i) {
				return true
			}
			id := uint64(gk<<subBits|uint32(sub))<<32 | uint64(g.key(i))
			for f := range counts {
				counts[f] = t.value(g, nil, i, id, f)
			}
			return fn(id, counts)
		}) {
			return
		}
	}
}

// eachSet calls fn with the index of every bit set in set, in order, until fn returns
// false, and reports whether it went through them all. It skips a clear word at once:
// a checkpoint's walk then costs what changed, not the size of a group holding it (a
// group of a table of 10 M ids made over an hour holds ~700 000 entries, and a flush
// may change ten of them).
func eachSet(set []uint64, fn func(i int) bool) bool {
	for w, word := range set {
		for word != 0 {
			if !fn(w*64 + bits.TrailingZeros64(word)) {
				return false
			}
			word &= word - 1
		}
	}
	return true
}

// ClearDirty forgets what changed (after a checkpoint). The dirty bitmaps are freed, not
// cleared: between checkpoints most buckets stay clean and need none.
func (t *Table) ClearDirty() {
	for _, bk := range t.dirtyBuckets {
		if b := t.buckets[bk]; b != nil {
			b.dirty = nil
		}
	}
	for _, gk := range t.dirtyGroups {
		if g := t.groups[gk]; g != nil {
			g.dirty = nil
		}
	}
	// Their bytes changed: the bitmaps went, and written entries may have grown their
	// overflow lists.
	t.remeasure(t.dirtyBuckets, t.dirtyGroups)
	t.dirtyBuckets, t.dirtyGroups = emptied(t.dirtyBuckets), emptied(t.dirtyGroups)
	t.deleted = t.deleted[:0]
}

// emptied is keys emptied to be used again, or nil when it grew large (a table filled
// at once lists every bucket it made): a few thousand keys a flush are the rule.
func emptied(keys []uint32) []uint32 {
	if cap(keys) > 4096 {
		return nil
	}
	return keys[:0]
}

// sortedOnce sorts keys and drops the repeated ones: a bucket or group listed twice is
// walked once.
func sortedOnce(keys []uint32) []uint32 {
	slices.Sort(keys)
	return slices.Compact(keys)
}

// MemBytes estimates the RAM the table holds: arrays, their headers and index entries,
// overflow lists, dirty state.
//
// It measures only the groups and buckets whose bytes may have changed since it was last
// asked (the remeasure and dirty lists), keeping a total of the others: a walk of every
// group cost 1.6 ms at each flush of a table of 1 M ids made over 180 days (59 000
// groups; 0.03 ms now, BenchmarkMemBytes).
func (t *Table) MemBytes() int {
	// t.mem is the sum of every group's and bucket's acct, whatever is stale.
	if t.memStale {
		for _, b := range t.buckets {
			t.mem += b.remeasure()
		}
		for _, g := range t.groups {
			t.mem += g.remeasure()
		}
		t.memStale = false
	}
	for _, bk := range slices.Concat(t.remeasureBuckets, t.dirtyBuckets) {
		if b := t.buckets[bk]; b != nil {
			t.mem += b.remeasure()
		}
	}
	for _, gk := range slices.Concat(t.remeasureGroups, t.dirtyGroups) {
		if g := t.groups[gk]; g != nil {
			t.mem += g.remeasure()
		}
	}
	t.remeasureBuckets, t.remeasureGroups = emptied(t.remeasureBuckets), emptied(t.remeasureGroups)
	return t.mem + 8*cap(t.deleted) + 8*cap(t.scratch) + t.dir.bytes()
}

// SetTick sets the clock that every read or write of an id stamps on its group: a
// caller advancing it (say once a second) can tell which groups were used least recently.
func (t *Table) SetTick(tick uint32) { t.tick = tick }

// GroupInfo describes a group: the ids sharing id >> 40 (about 4.4 minutes of snowflake
// ids), the unit in which the table is moved to a colder tier.
type GroupInfo struct {
	Key     uint32 // id >> 40
	Touched uint32 // the tick of the last read or write of one of its ids
	Bytes   int    // RAM it holds, open buckets included
	IDs     int
}

// Groups returns every group that holds ids, in key order.
func (t *Table) Groups() []GroupInfo {
	out := make([]GroupInfo, 0, len(t.groups))
	idx := make(map[uint32]int, len(t.groups))
	for gk, g := range t.groups {
		idx[gk] = len(out)
		out = append(out, GroupInfo{Key: gk, Touched: g.touched, Bytes: g.bytes(), IDs: int(g.live)})
	}
	for bk, b := range t.buckets {
		gi := &out[idx[bk>>subBits]]
		gi.Bytes += b.bytes()
		gi.IDs += b.used
	}
	slices.SortFunc(out, func(a, b GroupInfo) int { return cmp.Compare(a.Key, b.Key) })
	return out
}

// DropGroup removes every id of group gk (id >> 40) from RAM, after a checkpoint wrote
// them to the cold tier. Its ids are not reported by Dirty, as changed or deleted: call it
// when the table is clean.
func (t *Table) DropGroup(gk uint32) {
	g := t.groups[gk]
	if g == nil {
		return
	}
	t.n -= int(g.live)
	for sub := range 1 << subBits {
		bk := gk<<subBits | uint32(sub)
		if b := t.buckets[bk]; b != nil {
			t.n -= b.used
			t.forgetBucket(bk)
		}
	}
	t.delGroup(gk)
	t.deleted = slices.DeleteFunc(t.deleted, func(id uint64) bool { return uint32(id>>40) == gk })
	t.last = nil
	if t.due && t.dueGK == gk {
		t.due = false
	}
}
