package hot

import (
	"slices"

	"github.com/tally-dev/tally/store"
)

// Options tune a Table.
type Options struct {
	// MaxLoad is the fraction of a bucket's slots (entries plus tombstones) above which
	// it grows or is rehashed.
	MaxLoad float64
	// CompactLoad is the load Compact packs buckets to.
	CompactLoad float64
	// MinSize is a new bucket's slot count.
	MinSize int
}

// DefaultOptions grow at 0.9 and pack sealed buckets to 0.97.
func DefaultOptions() Options {
	return Options{MaxLoad: 0.9, CompactLoad: 0.97, MinSize: 7}
}

// Table is the packed counter table. It implements store.Table.
type Table struct {
	opt     Options
	fields  int
	buckets map[uint32]*bucket
	last    *bucket // the bucket of the previous call: ids arrive in runs of one time
	lastKey uint32
	n       int
	deleted []uint64 // dirty ids that were deleted since ClearDirty
	newest  uint32   // the newest bucket; older ones are sealed and packed
	slabs   slabs    // arrays of packed buckets
}

var _ store.Table = (*Table)(nil)

// New returns an empty table with the given number of counters per id (at most 255).
func New(fields int) *Table { return NewWithOptions(fields, DefaultOptions()) }

// NewWithOptions is New with options.
func NewWithOptions(fields int, opt Options) *Table {
	if opt.MinSize < 3 {
		opt.MinSize = 3
	}
	return &Table{opt: opt, fields: fields, buckets: map[uint32]*bucket{}}
}

func split(id uint64) (bucketKey, suffix uint32) { return uint32(id >> 32), uint32(id) }

func (t *Table) bucket(bk uint32, create bool) *bucket {
	if t.last != nil && t.lastKey == bk {
		return t.last
	}
	b := t.buckets[bk]
	if b == nil {
		if !create {
			return nil
		}
		b = newBucket(nextPrime(t.opt.MinSize), t.fields)
		t.buckets[bk] = b
		if bk > t.newest {
			// Snowflake ids arrive in time order: a new second seals the previous one,
			// which is packed now, once, instead of sitting at growth-time load.
			if prev := t.buckets[t.newest]; prev != nil {
				t.pack(t.newest, prev)
			}
			t.newest = bk
		}
	}
	t.last, t.lastKey = b, bk
	return b
}

// Fields is the number of counters per id.
func (t *Table) Fields() int { return t.fields }

// Len is the number of ids stored.
func (t *Table) Len() int { return t.n }

// value reads counter f of the entry at slot.
func (t *Table) value(b *bucket, slot int, id uint64, f int) uint64 {
	c := b.count(slot, f)
	if c == escape {
		return b.ovGet(uint32(id), f)
	}
	return uint64(c)
}

// store writes counter f of the entry at slot, escaping values that do not fit.
func (t *Table) store(b *bucket, slot int, id uint64, f int, v uint64) {
	if b.count(slot, f) == escape && v < escape {
		b.ovDelete(uint32(id), f)
	}
	if v >= escape {
		b.ovSet(uint32(id), f, v)
		b.setCount(slot, f, escape)
		return
	}
	b.setCount(slot, f, uint16(v))
}

// Get copies id's counters into dst and reports whether id is stored.
func (t *Table) Get(id uint64, dst []uint64) bool {
	bk, key := split(id)
	b := t.bucket(bk, false)
	slot := -1
	if b != nil {
		slot = b.find(key, t.fields)
	}
	if slot < 0 {
		clear(dst)
		return false
	}
	for f := range dst {
		dst[f] = t.value(b, slot, id, f)
	}
	return true
}

// Add adds n to counter f of id (never below zero) and returns the new value.
func (t *Table) Add(id uint64, f int, n int64) uint64 {
	bk, key := split(id)
	b := t.bucket(bk, n > 0)
	if b == nil {
		return 0
	}
	slot := b.find(key, t.fields)
	if slot < 0 {
		if n <= 0 {
			return 0
		}
		b, slot = t.insert(bk, b, key)
	}
	v := store.AddSat(t.value(b, slot, id, f), n)
	t.set(b, slot, id, f, v)
	return v
}

// Set sets counter f of id to v.
func (t *Table) Set(id uint64, f int, v uint64) {
	bk, key := split(id)
	b := t.bucket(bk, v != 0)
	if b == nil {
		return
	}
	slot := b.find(key, t.fields)
	if slot < 0 {
		if v == 0 {
			return
		}
		b, slot = t.insert(bk, b, key)
	}
	t.set(b, slot, id, f, v)
}

// Put replaces all counters of id; all zeros deletes it.
func (t *Table) Put(id uint64, counts []uint64) {
	for f, v := range counts {
		t.Set(id, f, v)
	}
}

// set stores v and deletes the entry when its last non-zero counter becomes zero.
func (t *Table) set(b *bucket, slot int, id uint64, f int, v uint64) {
	t.store(b, slot, id, f, v)
	b.markDirty(slot)
	if v == 0 && b.isZero(slot, t.fields) {
		// A tombstone: zero counters, a non-zero key (0 would read as empty).
		b.setKey(slot, 1)
		b.used--
		b.tombs++
		t.n--
		t.deleted = append(t.deleted, id)
	}
}

// insert makes room for key and returns its slot; the slot's counters are zero until the
// caller stores one, which is what makes it used.
func (t *Table) insert(bk uint32, b *bucket, key uint32) (*bucket, int) {
	if float64(b.used+b.tombs+1) > t.opt.MaxLoad*float64(b.size()) {
		size := b.size()
		if float64(b.used+1) > t.opt.MaxLoad*float64(size)*0.75 {
			size = nextPrime(2 * size) // mostly entries: grow
		} // mostly tombstones: rehash in place
		b = t.rehash(bk, b, size, false)
	}
	slot := b.insertSlot(key, t.fields)
	if b.key(slot) != 0 {
		b.tombs--
	}
	b.setKey(slot, key)
	b.used++
	t.n++
	return b, slot
}

// rehash moves a bucket's entries into a new array of size slots, dropping tombstones;
// packed buckets take their arrays from the slabs.
func (t *Table) rehash(bk uint32, old *bucket, size int, packed bool) *bucket {
	nb := newBucket
	if packed {
		nb = t.slabs.bucket
	}
	return t.move(bk, old, nb(size, t.fields))
}

func (t *Table) move(bk uint32, old, nb *bucket) *bucket {
	for s := range old.size() {
		if old.isZero(s, t.fields) {
			continue
		}
		slot := nb.insertSlot(old.key(s), t.fields)
		nb.copySlot(slot, old, s)
		nb.used++
		if old.isDirty(s) {
			nb.markDirty(slot)
		}
	}
	nb.ovKeys, nb.ovVals = slices.Clip(old.ovKeys), slices.Clip(old.ovVals)
	t.buckets[bk] = nb
	t.last, t.lastKey = nb, bk
	return nb
}

// Compact packs every bucket to CompactLoad and frees empty ones. Sealed buckets are
// packed as new ones open; Compact also packs the newest (before a snapshot, or when ids
// do not arrive in time order).
func (t *Table) Compact() {
	for bk, b := range t.buckets {
		if b.used == 0 {
			delete(t.buckets, bk)
			continue
		}
		t.pack(bk, b)
	}
	t.last = nil
}

// pack rehashes a bucket to CompactLoad if that makes it smaller or clears tombstones.
func (t *Table) pack(bk uint32, b *bucket) {
	if b.packed && b.tombs == 0 {
		return
	}
	size := nextPrime(max(int(float64(b.used)/t.opt.CompactLoad)+1, b.used+1))
	if size < b.size() || b.tombs > 0 {
		t.rehash(bk, b, size, true)
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
	out := make([]uint32, 0, len(t.buckets))
	for bk, b := range t.buckets {
		if b.used > 0 {
			out = append(out, bk)
		}
	}
	slices.Sort(out)
	return out
}

// RangeBucket calls fn for every id of one time bucket; it reports false if fn stopped it.
func (t *Table) RangeBucket(bk uint32, fn func(id uint64, counts []uint64) bool) bool {
	b := t.buckets[bk]
	if b == nil {
		return true
	}
	counts := make([]uint64, t.fields)
	for s := range b.size() {
		if b.isZero(s, t.fields) {
			continue
		}
		id := uint64(bk)<<32 | uint64(b.key(s))
		for f := range counts {
			counts[f] = t.value(b, s, id, f)
		}
		if !fn(id, counts) {
			return false
		}
	}
	return true
}

// DropBucket removes a whole time bucket (after it was moved to the cold tier).
func (t *Table) DropBucket(bk uint32) {
	b := t.buckets[bk]
	if b == nil {
		return
	}
	t.n -= b.used
	delete(t.buckets, bk)
	t.last = nil
}

// Dirty calls fn for every id changed since ClearDirty with its counters; a deleted id
// comes with all zeros (a checkpoint must delete it too). It stops when fn returns false.
func (t *Table) Dirty(fn func(id uint64, counts []uint64) bool) {
	counts := make([]uint64, t.fields)
	for _, id := range t.deleted {
		if !t.Get(id, counts) && !fn(id, counts) { // re-inserted ids are reported below
			return
		}
	}
	for bk, b := range t.buckets {
		if b.dirty == nil {
			continue
		}
		for s := range b.size() {
			if !b.isDirty(s) || b.isZero(s, t.fields) {
				continue
			}
			id := uint64(bk)<<32 | uint64(b.key(s))
			for f := range counts {
				counts[f] = t.value(b, s, id, f)
			}
			if !fn(id, counts) {
				return
			}
		}
	}
}

// ClearDirty forgets what changed (after a checkpoint).
func (t *Table) ClearDirty() {
	for _, b := range t.buckets {
		b.dirty = nil
	}
	t.deleted = t.deleted[:0]
}

// MemBytes is the RAM the table holds: bucket arrays, their headers, the overflow map.
func (t *Table) MemBytes() int {
	n := 0
	for _, b := range t.buckets {
		n += b.bytes()
	}
	return n + 8*cap(t.deleted)
}
