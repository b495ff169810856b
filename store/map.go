package store

// Map is a Table backed by a Go map; it is the reference the packed tables are checked
// and benchmarked against.
type Map struct {
	fields int
	m      map[uint64][]uint64
	dirty  map[uint64]struct{}
}

// NewMap returns an empty Map with the given number of counters per id.
func NewMap(fields int) *Map {
	return &Map{fields: fields, m: make(map[uint64][]uint64), dirty: make(map[uint64]struct{})}
}

func (t *Map) Fields() int { return t.fields }
func (t *Map) Len() int    { return len(t.m) }

func (t *Map) Add(id uint64, f int, n int64) uint64 {
	c := t.m[id]
	var old uint64
	if c != nil {
		old = c[f]
	}
	v := AddSat(old, n)
	t.Set(id, f, v)
	return v
}

func (t *Map) Set(id uint64, f int, v uint64) {
	t.dirty[id] = struct{}{}
	c := t.m[id]
	if c == nil {
		if v == 0 {
			return
		}
		c = make([]uint64, t.fields)
		t.m[id] = c
	}
	c[f] = v
	if v == 0 && allZero(c) {
		delete(t.m, id)
	}
}

func (t *Map) Get(id uint64, dst []uint64) bool {
	c := t.m[id]
	if c == nil {
		clear(dst)
		return false
	}
	copy(dst, c)
	return true
}

func (t *Map) Put(id uint64, counts []uint64) {
	t.dirty[id] = struct{}{}
	if allZero(counts) {
		delete(t.m, id)
		return
	}
	c := t.m[id]
	if c == nil {
		c = make([]uint64, t.fields)
		t.m[id] = c
	}
	copy(c, counts)
}

func (t *Map) Range(fn func(id uint64, counts []uint64) bool) {
	for id, c := range t.m {
		if !fn(id, c) {
			return
		}
	}
}

func allZero(c []uint64) bool {
	for _, v := range c {
		if v != 0 {
			return false
		}
	}
	return true
}

func (t *Map) Dirty(fn func(id uint64, counts []uint64) bool) {
	c := make([]uint64, t.fields)
	for id := range t.dirty {
		t.Get(id, c)
		if !fn(id, c) {
			return
		}
	}
}

func (t *Map) ClearDirty() { clear(t.dirty) }
