package counter

import (
	"cmp"
	"io"
	"slices"
	"sync/atomic"
	"time"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/store"
	"github.com/tally-dev/tally/store/hot"
)

// tiered is a table that can leave part of its ids to the cold tier and write itself to
// a snapshot: the packed hot table. Workers with another table keep every id in RAM.
type tiered interface {
	store.Table
	io.WriterTo
	io.ReaderFrom
	SetTick(uint32)
	Groups() []hot.GroupInfo
	DropGroup(gk uint32)
	MemBytes() int
}

// Budget bounds the RAM of the hot tables of every worker that shares it: after a
// checkpoint, a worker whose node is over the budget moves its least recently used
// groups of ids to the cold tier until the node is under it again.
type Budget struct {
	max  int64
	used atomic.Int64
}

// NewBudget returns a budget of max bytes; max <= 0 is unbounded.
func NewBudget(max int64) *Budget { return &Budget{max: max} }

// Used is the bytes the workers' hot tables hold, as of their last checkpoints.
func (b *Budget) Used() int64 { return b.used.Load() }

func (b *Budget) over() bool { return b != nil && b.max > 0 && b.used.Load() > b.max }

// groupOf is the eviction unit of an id: id >> 40, 2^18 ms of snowflake ids.
func groupOf(id uint64) uint32 { return uint32(id >> 40) }

// coldSet says which ids may be in the cold tier rather than in RAM: those of groups
// below below (but not group 0, which holds every id under 2^40 — not snowflake ids, so
// they have no age) and of the listed groups. For every other id the table is
// authoritative: absent means zero.
type coldSet struct {
	below  uint32
	groups []uint32 // sorted
	// zeroed are cold ids whose counters became zero in RAM since the last checkpoint:
	// the table no longer holds them but the cold tier still has their old value.
	zeroed map[uint64]struct{}
}

func (c *coldSet) has(gk uint32) bool {
	if gk > 0 && gk < c.below {
		return true
	}
	_, ok := slices.BinarySearch(c.groups, gk)
	return ok
}

func (c *coldSet) empty() bool { return c.below <= 1 && len(c.groups) == 0 }

func (c *coldSet) add(gk uint32) {
	if gk > 0 && gk < c.below {
		return
	}
	if i, ok := slices.BinarySearch(c.groups, gk); !ok {
		c.groups = slices.Insert(c.groups, i, gk)
	}
}

// raise makes every group below gk cold and forgets the listed ones it covers.
func (c *coldSet) raise(gk uint32) {
	if gk <= c.below {
		return
	}
	c.below = gk
	c.groups = slices.DeleteFunc(c.groups, func(g uint32) bool { return g > 0 && g < gk })
}

// isCold reports whether id may live in the cold tier (not whether it does).
func (w *Worker) isCold(id uint64) bool {
	return w.tier != nil && !w.cold.empty() && w.cold.has(groupOf(id))
}

// known fills dst with what RAM knows of a cold id — zeroed since the last checkpoint, or
// cached — and reports whether it did.
func (w *Worker) known(id uint64, dst []uint64) bool {
	if _, ok := w.cold.zeroed[id]; ok {
		clear(dst)
		return true
	}
	if w.cache.Get(id, dst) {
		w.stats.ColdHits.Add(1)
		return true
	}
	return false
}

// knows reports whether RAM knows a cold id (as known), without reading it or counting
// a hit: prefetch's look before warm's, which counts.
func (w *Worker) knows(id uint64) bool {
	_, ok := w.cold.zeroed[id]
	return ok || w.cache.Has(id)
}

// readCold fills out[i] for the ids at idx, which the table does not hold and which may
// be cold: from what RAM knows, or one Badger transaction for the rest, which are cached.
func (w *Worker) readCold(ids []uint64, out [][]uint64, idx []int) error {
	var missIDs []uint64
	var missOut [][]uint64
	for _, i := range idx {
		if !w.known(ids[i], out[i]) {
			missIDs, missOut = append(missIDs, ids[i]), append(missOut, out[i])
		}
	}
	if len(missIDs) == 0 {
		return nil
	}
	w.stats.ColdReads.Add(int64(len(missIDs)))
	if err := w.stored.Counts(w.db, missIDs, missOut, w.recorded); err != nil {
		return err
	}
	for i, id := range missIDs {
		w.cache.Put(id, missOut[i])
	}
	return nil
}

// coldMisses are the cold ids of a delta batch that prefetch reads from Badger, and the
// room their counts are read into.
type coldMisses struct {
	ids  []uint64
	flat []uint64
	out  [][]uint64
	idx  []int
}

// prefetch reads from Badger, in one transaction, the cold ids of ds that neither the
// table nor RAM's knowledge holds, into the cold cache, where warm then finds each: views
// of old posts took a transaction an id (a tenth of the allocations of a views-only run).
// Most of those read zeros (posts never counted), which the table does not keep.
func (w *Worker) prefetch(ds []pipeline.Delta) error {
	if w.tier == nil || w.cold.empty() || w.cache.Size() <= 0 {
		return nil
	}
	m := &w.misses
	m.ids = m.ids[:0]
	fields := uint8(len(w.cfg.Family.Fields))
	for _, d := range ds {
		if d.Field < fields && w.isCold(d.ID) && !w.table.Get(d.ID, w.scratch) && !w.knows(d.ID) {
			m.ids = append(m.ids, d.ID)
		}
	}
	if len(m.ids) < 2 { // warm reads one as well
		return nil
	}
	slices.Sort(m.ids) // an id's fields are deltas of their own
	m.ids = slices.Compact(m.ids)
	// More than the cache holds would push out of it what warm has yet to take.
	m.ids = m.ids[:min(len(m.ids), w.cache.Size()/2)]
	nf := len(w.scratch)
	m.flat = slices.Grow(m.flat[:0], len(m.ids)*nf)[:len(m.ids)*nf]
	m.out, m.idx = m.out[:0], m.idx[:0]
	for i := range m.ids {
		m.out = append(m.out, m.flat[i*nf:(i+1)*nf:(i+1)*nf])
		m.idx = append(m.idx, i)
	}
	return w.readCold(m.ids, m.out, m.idx) // one transaction, every id read cached
}

// warm brings a cold id into the table before it changes, so the change applies to its
// stored value exactly once; it reports whether id is cold, so the caller can tell when
// its counters become zero.
func (w *Worker) warm(id uint64) (bool, error) {
	isCold := w.isCold(id)
	if !isCold || w.table.Get(id, w.scratch) {
		return isCold, nil
	}
	if !w.known(id, w.scratch) {
		w.stats.ColdReads.Add(1)
		if err := w.stored.Counts(w.db, []uint64{id}, [][]uint64{w.scratch}, w.recorded); err != nil {
			return true, err
		}
	}
	w.cache.Drop(id) // the table holds it now
	delete(w.cold.zeroed, id)
	w.table.Put(id, w.scratch)
	return true, nil
}

// now is the tick stamped on groups as they are used: Unix seconds, so ticks of
// different workers compare.
func now() uint32 { return uint32(time.Now().Unix()) }

// evict moves groups to the cold tier: those older than ColdAge and, while the node is
// over its budget, the least recently used. The table must be clean (just after a
// checkpoint): every id it drops is then in Badger with the value it had.
func (w *Worker) evict() {
	t := w.tier
	if t == nil {
		return
	}
	t.SetTick(now())
	// Aged groups leave RAM as a whole when their time passes the limit, and again when
	// ids of theirs were read or changed since.
	if limit := w.ageLimit(); limit > 0 && time.Since(w.lastAged) >= w.cfg.AgeEvery {
		w.lastAged = time.Now()
		dropped := false
		for _, g := range t.Groups() {
			if g.Key >= limit {
				break
			}
			if g.Key > 0 {
				w.drop(g)
				dropped = true
			}
		}
		w.cold.raise(limit)
		if dropped {
			w.account()
		}
	}
	if !w.cfg.Budget.over() {
		return
	}
	groups := t.Groups()
	slices.SortFunc(groups, func(a, b hot.GroupInfo) int { return cmp.Compare(a.Touched, b.Touched) })
	for _, g := range groups {
		if !w.cfg.Budget.over() {
			break
		}
		w.drop(g)
		w.cold.add(g.Key)
	}
	w.account()
}

// ageLimit is the first group younger than ColdAge (0 when nothing is that old): the
// snowflake time of an id is id >> 22 ms after IDEpoch, a group is id >> 40.
func (w *Worker) ageLimit() uint32 {
	if w.tier == nil || w.cfg.ColdAge <= 0 {
		return 0
	}
	ms := time.Now().Add(-w.cfg.ColdAge).UnixMilli() - w.cfg.IDEpoch
	if ms <= 0 {
		return 0
	}
	return uint32(min(uint64(ms)>>18, 1<<32-1))
}

// drop moves one group out of RAM; account settles the figures afterwards.
func (w *Worker) drop(g hot.GroupInfo) {
	w.tier.DropGroup(g.Key)
	w.stats.Evicted.Add(1)
	w.stats.EvictedIDs.Add(int64(g.IDs))
	if w.cfg.Budget != nil {
		w.cfg.Budget.used.Add(-int64(g.Bytes))
	}
	w.reported -= int64(g.Bytes)
}

// unaccount takes the table out of the budget: the partition stopped (it may move to
// another process).
func (w *Worker) unaccount() {
	if w.cfg.Budget != nil {
		w.cfg.Budget.used.Add(-w.reported)
		w.reported = 0
	}
}

// account tells the budget what the table holds now.
func (w *Worker) account() {
	n := int64(w.tier.MemBytes())
	if w.cfg.Budget != nil {
		w.cfg.Budget.used.Add(n - w.reported)
	}
	w.reported = n
	w.bytes.Store(n)
	w.entries.Store(int64(w.table.Len()))
}
