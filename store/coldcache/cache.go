package coldcache

import "sync/atomic"

// Cache keeps the counters of cold ids read recently, zeros included, in two
// generations: a full young generation becomes the old one and the old one is dropped,
// so the cache holds at most Size ids and a hit in the old generation moves the id back
// to the young one. An id's counters are put whole: a counter worker never changes them
// in the cache, since an increment moves the id into its table, which is read first
// (and drops it here).
//
// Each generation keeps its counts in one array, by slot, and a map of id to slot: no
// pointer for the collector to follow, nothing allocated per id once the generations
// have grown (they are emptied, not made again). A map of id to a slice of its own cost
// an allocation per id read from Badger, and the collector a pointer per id cached.
type Cache struct {
	size       int     // without a budget
	budget     *Budget // else its share of it
	holding    bool    // counted among the budget's holders
	used       bool    // asked or given an id since the last Tick
	idle       int     // Ticks in a row without
	width      int     // counts an id (the family's fields), set by the first put
	young, old cacheGen
}

// Budget is how many ids the caches of one process hold in all, shared out evenly
// among the caches that hold any: the partitions whose readers ask for old posts get the
// room of those that read none. A share is taken up as the cache's young generation
// turns, so while caches join, those that joined first may hold up to their older, larger
// share for one more turn.
type Budget struct {
	ids     int
	holders atomic.Int64
}

// NewBudget returns a budget of ids.
func NewBudget(ids int) *Budget { return &Budget{ids: ids} }

// Cache returns a cache that draws on b.
func (b *Budget) Cache() *Cache { return &Cache{budget: b} }

// Holders is how many caches hold ids now.
func (b *Budget) Holders() int { return int(b.holders.Load()) }

// cacheGen is one generation of a Cache: slot[id] is the id's place in vals, in
// widths; dropped ids leave their slots until the generation is emptied.
type cacheGen struct {
	slot map[uint64]uint32
	vals []uint64
}

func (g *cacheGen) get(id uint64, width int, dst []uint64) bool {
	s, ok := g.slot[id]
	if ok {
		copy(dst, g.vals[int(s)*width:int(s+1)*width])
	}
	return ok
}

// Get fills dst with the counters of id and reports whether the cache holds it.
func (c *Cache) Get(id uint64, dst []uint64) bool {
	c.used = true
	if c.young.get(id, c.width, dst) {
		return true
	}
	if !c.old.get(id, c.width, dst) {
		return false
	}
	c.Put(id, dst)
	return true
}

// Has reports whether the cache holds id, without reading it.
func (c *Cache) Has(id uint64) bool {
	_, young := c.young.slot[id]
	_, old := c.old.slot[id]
	return young || old
}

// Put caches a copy of v, the counters of id. Every id of a cache has as many counters
// as the first put (a family's fields); a put of another width is ignored.
func (c *Cache) Put(id uint64, v []uint64) {
	c.used = true
	size := c.Size()
	if size <= 0 {
		return
	}
	if c.budget != nil && !c.holding {
		c.holding = true
		c.budget.holders.Add(1)
	}
	if c.width == 0 {
		c.width = len(v)
	}
	if len(v) != c.width { // a worker's ids are of one family: never
		return
	}
	if s, ok := c.young.slot[id]; ok {
		copy(c.young.vals[int(s)*c.width:], v)
		return
	}
	if len(c.young.vals)/c.width >= max(size/2, 1) { // dropped ids' slots count: bounded
		c.old, c.young = c.young, c.old
		clear(c.young.slot)
		c.young.vals = c.young.vals[:0]
	}
	if c.young.slot == nil {
		c.young.slot = make(map[uint64]uint32)
	}
	c.young.slot[id] = uint32(len(c.young.vals) / c.width)
	c.young.vals = append(c.young.vals, v...)
}

// Drop forgets id (its counters are no longer the cold tier's).
func (c *Cache) Drop(id uint64) {
	delete(c.young.slot, id)
	delete(c.old.slot, id)
}

// Len is how many ids the cache holds.
func (c *Cache) Len() int { return len(c.young.slot) + len(c.old.slot) }

// New returns a cache of at most size ids (none when size ≤ 0).
func New(size int) *Cache { return &Cache{size: size} }

// Size is the most ids the cache holds: with a budget, its share as a holder.
func (c *Cache) Size() int {
	if c.budget == nil {
		return c.size
	}
	n := c.budget.holders.Load()
	if !c.holding {
		n++
	}
	return c.budget.ids / int(n)
}

// IdleTicks is how many Ticks in a row a cache drawing on a budget is neither asked
// nor given an id before it gives its share back (Close): a counter partition ticks at
// each flush (100 ms by default), so one that reads no cold id for 5 s leaves the room
// to those that do.
const IdleTicks = 50

// Tick counts one period of its owner's (a counter partition's flush tick); a cache on a
// budget unused for IdleTicks of them in a row is closed.
func (c *Cache) Tick() {
	if c.used {
		c.used, c.idle = false, 0
		return
	}
	if c.idle++; c.idle >= IdleTicks && c.holding {
		c.Close()
	}
}

// Close empties the cache and gives its share of the budget back; it may be used again.
func (c *Cache) Close() {
	if c.holding {
		c.holding = false
		c.budget.holders.Add(-1)
	}
	c.young, c.old = cacheGen{}, cacheGen{}
}
