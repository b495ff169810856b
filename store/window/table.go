package window

// freshShare bounds fresh: when it holds more than one id in freshShare of those the
// leaves hold (and minFresh at least), the leaves are rebuilt with its ids. A fresh id
// costs about 30 bytes where a leaf id costs 6, and a rebuild costs a pass over the
// leaves: at 16, fresh adds at most 2 bytes an id, and a rebuild is paid by 16 leaf ids
// an id moved to fresh.
const (
	freshShare = 16
	minFresh   = 1024
)

// Table holds the changes of the ids with changes at or above its floor. The zero value
// is not usable: call New.
type Table struct {
	leaves leaves
	fresh  fresh
	floor  uint32
	// epoch is the minute the bodies count from: the floor when the table was last
	// pruned or empty. No change kept is older.
	epoch   uint32
	scratch []Change
	buf     []byte
}

// New returns an empty table.
func New() *Table { return &Table{fresh: newFresh()} }

// Len is the number of ids with changes.
func (t *Table) Len() int { return t.leaves.live + t.fresh.ids }

// Bytes is the RAM the table holds: its leaves, fresh's slots and arena.
func (t *Table) Bytes() int { return t.leaves.bytes() + t.fresh.bytes() }

// Floor is the first minute kept.
func (t *Table) Floor() uint32 { return t.floor }

// SetFloor forgets the changes of the minutes below floor: at once for what a query or
// a record returns, in RAM at the next Prune. A floor never moves back.
func (t *Table) SetFloor(floor uint32) {
	t.floor = max(t.floor, floor)
	if t.Len() == 0 && len(t.leaves.data) == 0 && len(t.fresh.arena) == 0 {
		t.epoch = t.floor
	}
}

// where is where id's body is: in fresh at slot, or in the leaves at a.
type where struct {
	slot   int
	fresh  bool
	a      at
	leaves bool
}

// find looks in the leaves first: an id live there is not in fresh, and fresh is
// probed (a cache miss) only for the ids the leaves do not hold.
func (t *Table) find(id uint64) where {
	if a, ok := t.leaves.find(id); ok {
		return where{a: a, leaves: true}
	}
	if t.fresh.ids > 0 {
		if i, ok := t.fresh.slot(id); ok {
			return where{slot: i, fresh: true}
		}
	}
	return where{}
}

func (t *Table) body(w where) []byte {
	switch {
	case w.fresh:
		return t.fresh.body(w.slot)
	case w.leaves:
		return t.leaves.body(w.a)
	}
	return nil
}

// changes decodes the body at w into t.scratch, the changes below the floor with them
// (merge drops those).
func (t *Table) changes(w where) []Change {
	t.scratch = decodeBody(t.scratch[:0], t.body(w), t.epoch)
	return t.scratch
}

// Add adds c's change to its id's record; a change below the floor is forgotten.
func (t *Table) Add(id uint64, c Change) {
	if c.Minute < t.floor || c.N == 0 {
		return
	}
	w := t.find(id)
	t.scratch = merge(t.changes(w), c, t.floor)
	t.store(id, w, t.scratch)
}

// Has reports whether the table holds id: its changes, below the floor too until a
// Prune forgets them.
func (t *Table) Has(id uint64) bool {
	w := t.find(id)
	return w.fresh || w.leaves
}

// Sum adds to out[f] the changes of field f of id at or after minute since (and the
// floor); fields past out are skipped.
func (t *Table) Sum(id uint64, since uint32, out []int64) {
	sumBody(t.body(t.find(id)), t.epoch, max(since, t.floor), out)
}

// Record appends id's record, without the changes below the floor, to dst: what a
// checkpoint stores (empty: delete it).
func (t *Table) Record(dst []byte, id uint64) []byte {
	return AppendRecord(dst, merge(t.changes(t.find(id)), Change{}, t.floor))
}

// Put sets id's record to rec as stored (a loaded checkpoint); changes below the floor
// are dropped, and it reports whether anything is left.
func (t *Table) Put(id uint64, rec []byte) (bool, error) {
	cs, err := DecodeRecord(t.scratch[:0], rec)
	if err != nil {
		return false, err
	}
	t.scratch = merge(cs, Change{}, t.floor)
	t.store(id, t.find(id), t.scratch)
	return len(t.scratch) > 0, nil
}

// store writes cs as the changes of id, found at w, deleting it when cs is empty.
func (t *Table) store(id uint64, w where, cs []Change) {
	if len(cs) > 0 && t.Len() == 0 && !w.fresh && !w.leaves && len(t.leaves.data) == 0 && len(t.fresh.arena) == 0 {
		t.epoch = t.floor // nothing counts from the old epoch
	}
	t.buf = appendBody(t.buf[:0], cs, t.epoch)
	switch {
	case w.fresh && len(cs) == 0:
		t.fresh.delete(w.slot)
	case w.fresh:
		t.fresh.set(w.slot, true, id, t.buf)
	case w.leaves && len(cs) > 0 && len(t.buf) == w.a.end-w.a.body:
		// As long as it was: in place. A view counted again in its minute changes only
		// a count, which mostly keeps its length, and moving the id to fresh for it
		// made most of the rebuilds of a table taking views.
		copy(t.leaves.data[w.a.body:w.a.end], t.buf)
	case w.leaves && w.a.end == len(t.leaves.data) && len(cs) > 0:
		t.leaves.rewrite(w.a, t.buf) // the newest id, as it takes its first changes
	case w.leaves:
		t.leaves.kill(w.a)
		if len(cs) > 0 {
			t.insert(id)
		}
	case len(cs) == 0:
	case t.leaves.n == 0 || id > t.leaves.last:
		t.leaves.push(id, t.buf)
	default:
		t.insert(id)
	}
}

// insert puts t.buf in fresh as the body of id, which fresh does not hold, and rebuilds
// the leaves when fresh has outgrown its share.
func (t *Table) insert(id uint64) {
	t.fresh.set(0, false, id, t.buf)
	if t.fresh.ids > minFresh && t.fresh.ids*freshShare > t.leaves.live {
		t.rebuild(false, nil)
	}
}

// Prune drops the changes below the floor from RAM and compacts the table, calling gone
// for every id left with none (its stored record is to be deleted). It costs a pass
// over the table: call it when the floor has moved on by a few minutes or garbage is
// half the arena (Worth).
func (t *Table) Prune(gone func(id uint64)) { t.rebuild(true, gone) }

// Worth reports whether garbage is at least half the bytes the bodies take: a Prune
// then halves them.
func (t *Table) Worth() bool {
	g := t.fresh.garbage + t.leaves.deadBytes
	return g > 4096 && 2*g > len(t.fresh.arena)+len(t.leaves.data)
}

// each calls fn with every id and its changes (below the floor too); cs is only valid
// during the call.
func (t *Table) each(fn func(id uint64, cs []Change)) {
	t.leaves.each(func(id uint64, body []byte) { fn(id, decodeBody(nil, body, t.epoch)) })
	for i, ref := range t.fresh.refs {
		if ref != 0 {
			fn(t.fresh.keys[i], decodeBody(nil, t.fresh.body(i), t.epoch))
		}
	}
}
