package window

import (
	"encoding/binary"
	"math/bits"
)

// Table holds the records of the ids with changes at or above its floor. The zero value
// is not usable: call New.
type Table struct {
	// keys and refs are an open-addressing table with linear probing: refs[i] is 1 + the
	// offset in arena of keys[i]'s record (a uvarint length, then the record), 0 an
	// empty slot. Deletion shifts back, so there are no tombstones.
	keys  []uint64
	refs  []uint32
	arena []byte
	ids   int
	// garbage is the bytes of arena no record refers to any more.
	garbage int
	floor   uint32
	scratch []Change
}

// New returns an empty table.
func New() *Table {
	return &Table{keys: make([]uint64, 16), refs: make([]uint32, 16)}
}

// Len is the number of ids with a record.
func (t *Table) Len() int { return t.ids }

// Bytes is the RAM the table holds: its slots and its arena.
func (t *Table) Bytes() int { return 12*len(t.keys) + cap(t.arena) }

// Floor is the first minute kept.
func (t *Table) Floor() uint32 { return t.floor }

// SetFloor forgets the changes of the minutes below floor: at once for what a query or
// a record returns, in RAM at the next Prune. A floor never moves back.
func (t *Table) SetFloor(floor uint32) { t.floor = max(t.floor, floor) }

func (t *Table) slot(id uint64) (int, bool) {
	mask := len(t.keys) - 1
	i := int((id*0x9E3779B97F4A7C15)>>(64-bits.Len(uint(mask)))) & mask
	for ; t.refs[i] != 0; i = (i + 1) & mask {
		if t.keys[i] == id {
			return i, true
		}
	}
	return i, false
}

// record returns the record at slot i.
func (t *Table) record(i int) []byte {
	off := int(t.refs[i] - 1)
	n, k := binary.Uvarint(t.arena[off:])
	return t.arena[off+k : off+k+int(n)]
}

// changes decodes id's record, without the changes below the floor, into t.scratch.
func (t *Table) changes(id uint64) ([]Change, int, bool) {
	i, ok := t.slot(id)
	if !ok {
		return t.scratch[:0], i, false
	}
	// Records in the arena were checked when written.
	cs, _ := DecodeRecord(t.scratch[:0], t.record(i))
	return cs, i, true
}

// Add adds c's change to its id's record; a change below the floor is forgotten.
func (t *Table) Add(id uint64, c Change) {
	if c.Minute < t.floor || c.N == 0 {
		return
	}
	cs, _, _ := t.changes(id)
	t.scratch = merge(cs, c, t.floor)
	t.store(id, t.scratch)
}

// Sum adds to out[f] the changes of field f of id at or after minute since (and the
// floor); fields past out are skipped.
func (t *Table) Sum(id uint64, since uint32, out []int64) {
	i, ok := t.slot(id)
	if !ok {
		return
	}
	since = max(since, t.floor)
	rec := t.record(i)
	var m uint64
	for len(rec) > 0 {
		d, k := binary.Uvarint(rec)
		m += d
		f := rec[k]
		n, j := binary.Varint(rec[k+1:])
		rec = rec[k+1+j:]
		if m >= uint64(since) && int(f) < len(out) {
			out[f] += n
		}
	}
}

// Record appends id's record, without the changes below the floor, to dst: what a
// checkpoint stores (empty: delete it).
func (t *Table) Record(dst []byte, id uint64) []byte {
	cs, _, _ := t.changes(id)
	t.scratch = merge(cs, Change{}, t.floor)
	return AppendRecord(dst, t.scratch)
}

// Put sets id's record to rec as stored (a loaded checkpoint); changes below the floor
// are dropped, and it reports whether anything is left.
func (t *Table) Put(id uint64, rec []byte) (bool, error) {
	cs, err := DecodeRecord(t.scratch[:0], rec)
	if err != nil {
		return false, err
	}
	t.scratch = merge(cs, Change{}, t.floor)
	t.store(id, t.scratch)
	return len(t.scratch) > 0, nil
}

// store writes cs as id's record, deleting it when cs is empty.
func (t *Table) store(id uint64, cs []Change) {
	i, ok := t.slot(id)
	if ok {
		t.garbage += len(t.record(i)) + 1
		if len(cs) == 0 {
			t.delete(i)
			return
		}
	} else if len(cs) == 0 {
		return
	}
	off := len(t.arena)
	start := off + binary.MaxVarintLen32
	body := AppendRecord(append(t.arena, make([]byte, binary.MaxVarintLen32)...), cs)
	n := len(body) - start
	k := binary.PutUvarint(body[off:], uint64(n))
	t.arena = append(body[:off+k], body[start:]...)
	if ok {
		t.refs[i] = uint32(off + 1)
		return
	}
	t.keys[i], t.refs[i] = id, uint32(off+1)
	t.ids++
	if 4*t.ids > 3*len(t.keys) {
		t.rehash(2 * len(t.keys))
	}
}

// delete empties slot i, shifting back the entries after it that probed past it.
func (t *Table) delete(i int) {
	mask := len(t.keys) - 1
	t.ids--
	for j := (i + 1) & mask; t.refs[j] != 0; j = (j + 1) & mask {
		home := int((t.keys[j]*0x9E3779B97F4A7C15)>>(64-bits.Len(uint(mask)))) & mask
		// Move j to i when its home is not in (i, j] cyclically.
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			t.keys[i], t.refs[i] = t.keys[j], t.refs[j]
			i = j
		}
	}
	t.keys[i], t.refs[i] = 0, 0
}

func (t *Table) rehash(size int) {
	keys, refs := t.keys, t.refs
	t.keys, t.refs = make([]uint64, size), make([]uint32, size)
	for i, r := range refs {
		if r != 0 {
			j, _ := t.slot(keys[i])
			t.keys[j], t.refs[j] = keys[i], r
		}
	}
}

// Prune drops the changes below the floor from RAM and compacts the arena, calling
// gone for every id left with none (its stored record is to be deleted). It costs a
// pass over the table: call it when the floor has moved on by a few minutes or garbage
// is half the arena (Worth).
func (t *Table) Prune(gone func(id uint64)) {
	arena := make([]byte, 0, len(t.arena)-t.garbage)
	var dropped []uint64
	for i, r := range t.refs {
		if r == 0 {
			continue
		}
		cs, _ := DecodeRecord(t.scratch[:0], t.record(i))
		t.scratch = merge(cs, Change{}, t.floor)
		if len(t.scratch) == 0 {
			dropped = append(dropped, t.keys[i])
			continue
		}
		off := len(arena)
		rec := AppendRecord(nil, t.scratch)
		arena = append(binary.AppendUvarint(arena, uint64(len(rec))), rec...)
		t.refs[i] = uint32(off + 1)
	}
	t.arena, t.garbage = arena, 0
	for _, id := range dropped {
		i, _ := t.slot(id)
		t.delete(i)
		if gone != nil {
			gone(id)
		}
	}
	if size := len(t.keys); size > 16 && 4*t.ids < size/2 {
		t.rehash(max(16, 1<<bits.Len(uint(2*t.ids))))
	}
}

// Worth reports whether garbage is at least half the arena: a Prune then halves it.
func (t *Table) Worth() bool { return t.garbage > 4096 && 2*t.garbage > len(t.arena) }
