package hot

import (
	"fmt"

	"github.com/tally-dev/tally/store"
)

// Options tune a Table.
type Options struct {
	// MaxLoad is the fraction of an open bucket's slots (entries plus tombstones) above
	// which it is rehashed: doubled when live entries fill more than half of that
	// limit, else rehashed at the same size to clear tombstones.
	MaxLoad float64
	// MinSize is a new open bucket's slot count, rounded up to a power of two.
	MinSize int
}

// DefaultOptions grow open buckets at load 0.9, which double hashing handles without a
// cliff (see BenchmarkInsertNew).
func DefaultOptions() Options { return Options{MaxLoad: 0.9, MinSize: 8} }

// Table is the packed counter table. It implements store.Table.
type Table struct {
	opt     Options
	fields  int
	buckets map[uint32]*bucket // open buckets by id >> 32
	groups  map[uint32]*group  // by id >> 40; exists while it has sealed or open ids
	dir     directory          // finds most groups without the map
	// The bucket of the previous call: ids arrive in runs of one time.
	last    *bucket
	lastKey uint32
	n       int
	deleted []uint64 // ids deleted since ClearDirty
	newest  uint32   // the newest bucket seen; groups before its group are sealed
	started bool
	due     bool // a merge of group dueGK waits for the current call to finish
	dueGK   uint32
	scratch []uint64 // reused by merge
	tick    uint32   // stamped on a group when one of its ids is used (see SetTick)
	// dirtyBuckets and dirtyGroups hold the key of every bucket and group whose dirty
	// bitmap is not nil (and maybe keys of some since dropped or clean, and twice): a
	// checkpoint's walk goes through these, not the whole table.
	dirtyBuckets, dirtyGroups []uint32
	// mem is the bytes of the groups and buckets as last measured (their acct), and
	// remeasure the groups and buckets (by key, as the dirty lists) whose bytes may have
	// changed since: MemBytes measures those, not the whole table. memStale: the lists
	// grew past maxRemeasure (MemBytes not asked for), and MemBytes measures everything.
	mem                               int
	remeasureBuckets, remeasureGroups []uint32
	memStale                          bool
}

// maxRemeasure bounds the remeasure lists of a table whose MemBytes nobody asks for.
const maxRemeasure = 1 << 16

var _ store.Table = (*Table)(nil)

// New returns an empty table with the given number of counters per id (1 to 256).
func New(fields int) *Table { return NewWithOptions(fields, DefaultOptions()) }

// NewWithOptions is New with options; zero or out-of-range options take their defaults.
func NewWithOptions(fields int, opt Options) *Table {
	if fields < 1 || fields > 256 {
		panic(fmt.Sprintf("hot: %d counters per id, want 1 to 256", fields))
	}
	def := DefaultOptions()
	if opt.MaxLoad <= 0 || opt.MaxLoad > 0.99 {
		opt.MaxLoad = def.MaxLoad
	}
	size := 4
	for size < opt.MinSize {
		size *= 2
	}
	opt.MinSize = size
	return &Table{opt: opt, fields: fields, buckets: map[uint32]*bucket{}, groups: map[uint32]*group{}}
}

func split(id uint64) (bucketKey, suffix uint32) { return uint32(id >> 32), uint32(id) }

// bucket returns open bucket bk of group g, or nil.
func (t *Table) bucket(g *group, bk uint32) *bucket {
	if g.opened != nil {
		return g.opened[uint8(bk)]
	}
	if t.last != nil && t.lastKey == bk {
		return t.last
	}
	b := t.buckets[bk]
	if b != nil {
		t.last, t.lastKey = b, bk
	}
	return b
}

// setBucket makes b group g's open bucket bk, a new one or one rehashed.
func (t *Table) setBucket(g *group, bk uint32, b *bucket) {
	sub := uint8(bk)
	if old := t.buckets[bk]; old != nil && old != b {
		t.mem -= old.acct
	}
	t.buckets[bk] = b
	t.remeasure([]uint32{bk}, []uint32{bk >> subBits}) // the group: its opened index, made at openedFrom buckets
	t.last, t.lastKey = b, bk
	switch {
	case g.opened != nil:
		g.opened[sub] = b
	case !g.isOpen(sub) && g.openCount() == openedFrom-1:
		g.opened = new([1 << subBits]*bucket)
		for s := range 1 << subBits {
			if g.isOpen(uint8(s)) {
				g.opened[s] = t.buckets[bk&^0xFF|uint32(s)]
			}
		}
		g.opened[sub] = b
	}
	g.setOpen(sub, true)
}

// dropBucket forgets group g's open bucket bk.
func (t *Table) dropBucket(g *group, bk uint32) {
	t.forgetBucket(bk)
	g.setOpen(uint8(bk), false)
	if g.opened != nil {
		g.opened[uint8(bk)] = nil
	}
	t.last = nil
}

// group returns group gk or nil.
func (t *Table) group(gk uint32) *group {
	g, far := t.dir.get(gk)
	if far {
		g = t.groups[gk]
	}
	return g
}

func (t *Table) addGroup(gk uint32, g *group) {
	t.groups[gk] = g
	t.dir.add(gk, g, t.groups)
	t.remeasure(nil, []uint32{gk})
}

func (t *Table) delGroup(gk uint32) {
	if g := t.groups[gk]; g != nil {
		t.mem -= g.acct
	}
	delete(t.groups, gk)
	t.dir.del(gk)
}

// forgetBucket deletes open bucket bk from the map (its group's bits are the caller's).
func (t *Table) forgetBucket(bk uint32) {
	if b := t.buckets[bk]; b != nil {
		t.mem -= b.acct
	}
	delete(t.buckets, bk)
}

// remeasure lists open buckets and groups (by key) whose bytes may have changed: new
// ones, rehashed, merged, given open buckets, or freed of their dirty bitmaps. Written
// entries need no call until ClearDirty: the dirty lists hold their keys. Past
// maxRemeasure keys (MemBytes not asked for) the lists go, and MemBytes measures all.
func (t *Table) remeasure(buckets, groups []uint32) {
	switch {
	case t.memStale:
	case len(t.remeasureBuckets)+len(t.remeasureGroups)+len(buckets)+len(groups) > maxRemeasure:
		t.memStale, t.remeasureBuckets, t.remeasureGroups = true, nil, nil
	default:
		t.remeasureBuckets = append(t.remeasureBuckets, buckets...)
		t.remeasureGroups = append(t.remeasureGroups, groups...)
	}
}

// find locates id: in open bucket b at slot i when b is not nil, else at sealed entry i
// of g (which may be dead: all zeros), else i < 0.
func (t *Table) find(id uint64) (g *group, b *bucket, i int) {
	bk, key := split(id)
	g = t.group(bk >> subBits)
	if g == nil {
		return nil, nil, -1
	}
	g.touched = t.tick
	sub := uint8(bk)
	if g.isOpen(sub) {
		if b = t.bucket(g, bk); b != nil {
			if s := b.find(key); s >= 0 {
				return g, b, s
			}
		}
	}
	return g, nil, g.find(sub, key)
}

// counters returns the counter words of the entry find returned.
func counters(g *group, b *bucket, i int) []uint32 {
	if b != nil {
		return b.words[i*b.stride+1 : (i+1)*b.stride]
	}
	return g.counters(i)
}

// value reads counter f of the entry find returned.
func (t *Table) value(g *group, b *bucket, i int, id uint64, f int) uint64 {
	if b != nil {
		if c := b.count(i, f); c != escape {
			return uint64(c)
		}
		return b.ov.get(uint64(uint32(id))<<8 | uint64(f))
	}
	if c := g.count(i, f); c != escape {
		return uint64(c)
	}
	return g.ov.get(gOvKey(uint8(id>>32), uint32(id), f))
}

// storeCount writes counter f into an entry's counter words, escaping values that do not
// fit 16 bits to ov at key k.
func storeCount(w []uint32, ov *overflow, k uint64, f int, v uint64) {
	if getCount(w, f) == escape && v < escape {
		ov.del(k)
	}
	if v >= escape {
		ov.set(k, v)
		putCount(w, f, escape)
		return
	}
	putCount(w, f, uint16(v))
}

// set stores v (a change) in the entry find or insert returned and deletes the entry when
// its last non-zero counter becomes zero.
func (t *Table) set(g *group, b *bucket, i int, id uint64, f int, v uint64) {
	bk, key := split(id)
	if b != nil {
		storeCount(b.words[i*b.stride+1:(i+1)*b.stride], &b.ov, uint64(key)<<8|uint64(f), f, v)
		t.markBucket(b, bk, i)
		if v == 0 && b.isZero(i) {
			// A tombstone: zero counters and a non-zero key, since key 0 would read as
			// empty and cut the probe sequences that pass through this slot.
			b.setKey(i, 1)
			b.used--
			b.tombs++
			t.n--
			t.deleted = append(t.deleted, id)
		}
		return
	}
	wasZero := g.isZero(i)
	storeCount(g.counters(i), &g.ov, gOvKey(uint8(bk), key, f), f, v)
	t.markGroup(g, bk>>subBits, i)
	switch isZero := g.isZero(i); {
	case wasZero && !isZero:
		g.live++
		g.dead--
		t.n++
	case !wasZero && isZero:
		g.live--
		g.dead++
		t.n--
		t.deleted = append(t.deleted, id)
		if g.dead > g.live/4+16 {
			t.due, t.dueGK = true, bk>>subBits
		}
	}
}

// markBucket and markGroup mark entry i of bucket bk or group gk changed, and list the
// bucket or group when it has no changed entry yet. A bucket rehashed or a group merged
// keeps its key listed: whatever it becomes carries the marks on.
func (t *Table) markBucket(b *bucket, bk uint32, i int) {
	if b.dirty == nil {
		t.dirtyBuckets = append(t.dirtyBuckets, bk)
	}
	b.markDirty(i)
}

func (t *Table) markGroup(g *group, gk uint32, i int) {
	if g.dirty == nil {
		t.dirtyGroups = append(t.dirtyGroups, gk)
	}
	g.markDirty(i)
}

// settle runs a merge that set or insert asked for, once no entry index is held.
func (t *Table) settle() {
	if t.due {
		t.due = false
		t.merge(t.dueGK)
	}
}

// Fields is the number of counters per id.
func (t *Table) Fields() int { return t.fields }

// Len is the number of ids stored.
func (t *Table) Len() int { return t.n }

// Add adds n to counter f of id (never below zero) and returns the new value.
func (t *Table) Add(id uint64, f int, n int64) uint64 {
	g, b, i := t.find(id)
	if i >= 0 && n != 0 && n > -escape && n < escape {
		// The common case, in place: a live entry's counter that stays within 16 bits
		// and above zero, so no overflow entry and no deletion.
		w := counters(g, b, i)
		if c := getCount(w, f); c != escape && (c != 0 || b != nil || !isZeroWords(w)) {
			if v := int64(c) + n; v > 0 && v < escape {
				putCount(w, f, uint16(v))
				if b != nil {
					t.markBucket(b, uint32(id>>32), i)
				} else {
					t.markGroup(g, uint32(id>>32)>>subBits, i)
				}
				return uint64(v)
			}
		}
	}
	var old uint64
	if i >= 0 {
		old = t.value(g, b, i, id, f)
	}
	v := store.AddSat(old, n)
	if v != old {
		t.update(g, b, i, id, f, v)
	}
	return v
}

// Set sets counter f of id to v.
func (t *Table) Set(id uint64, f int, v uint64) {
	g, b, i := t.find(id)
	var old uint64
	if i >= 0 {
		old = t.value(g, b, i, id, f)
	}
	if v != old {
		t.update(g, b, i, id, f, v)
	}
}

// update stores a changed value, inserting id if it is absent.
func (t *Table) update(g *group, b *bucket, i int, id uint64, f int, v uint64) {
	if i < 0 {
		g, b, i = t.insert(id)
	}
	t.set(g, b, i, id, f, v)
	t.settle()
}

// Put replaces all counters of id; all zeros deletes it. It finds id once (Put is how a
// checkpoint is loaded at start). Non-zero counters are written first so that an id
// keeping some counter is never deleted on the way.
func (t *Table) Put(id uint64, counts []uint64) {
	g, b, i := t.find(id)
	for _, nonzero := range [2]bool{true, false} {
		for f, v := range counts {
			if (v != 0) != nonzero {
				continue
			}
			var old uint64
			if i >= 0 {
				old = t.value(g, b, i, id, f)
			}
			if v == old {
				continue
			}
			if i < 0 {
				g, b, i = t.insert(id)
			}
			t.set(g, b, i, id, f, v)
		}
	}
	t.settle()
}

// insert makes room for an absent id in its open bucket and returns the slot; the slot's
// counters are zero until the caller stores one, which is what makes it used.
func (t *Table) insert(id uint64) (*group, *bucket, int) {
	bk, key := split(id)
	gk := bk >> subBits
	switch {
	case !t.started:
		t.started, t.newest = true, bk
	case bk > t.newest:
		if gk > t.newest>>subBits {
			// Snowflake ids arrive in time order: a new group seals the previous one,
			// once, instead of leaving it in hash tables at growth-time load.
			t.merge(t.newest >> subBits)
		}
		t.newest = bk
	}
	g := t.group(gk)
	if g == nil {
		g = &group{stride: int32(strideOf(t.fields)), touched: t.tick}
		t.addGroup(gk, g)
	}
	if gk < t.newest>>subBits {
		// A late id (a first like on an old post) in a sealed group waits in an open
		// bucket; enough of them and the group is merged again.
		if g.late++; g.late > max(8, g.live/16) {
			t.due, t.dueGK = true, gk
		}
	}
	b := t.bucket(g, bk)
	if b == nil {
		b = newBucket(t.opt.MinSize, t.fields)
		t.setBucket(g, bk, b)
	}
	if float64(b.used+b.tombs+1) > t.opt.MaxLoad*float64(b.size()) {
		b = t.rehash(g, bk, b)
	}
	slot := b.insertSlot(key)
	if b.key(slot) != 0 {
		b.tombs--
	}
	b.setKey(slot, key)
	b.used++
	t.n++
	return g, b, slot
}

// rehash moves an open bucket's entries into a new array, dropping tombstones: twice the
// size when entries fill more than half the load limit, else the same size. Growth never
// touches another bucket, so its pause is bounded by one bucket, not the table.
func (t *Table) rehash(g *group, bk uint32, old *bucket) *bucket {
	size := old.size()
	if float64(old.used+1) > t.opt.MaxLoad*float64(size)/2 {
		size *= 2
	}
	nb := newBucket(size, t.fields)
	st := nb.stride
	for s := range old.size() {
		if old.isZero(s) {
			continue
		}
		d := nb.insertSlot(old.key(s))
		copy(nb.words[d*st:(d+1)*st], old.words[s*st:(s+1)*st])
		nb.used++
		if old.isDirty(s) {
			nb.markDirty(d)
		}
	}
	nb.ov = old.ov
	t.setBucket(g, bk, nb)
	return nb
}
