package window

import (
	"encoding/binary"
	"math/bits"
)

// fresh holds the ids whose body changed since the leaves were last rebuilt, and were
// not the newest id of the leaves: an open-addressing table with linear probing of the
// id and its body's offset in arena (a uvarint length, then the body), 12 bytes a slot.
// It is the one part of the table that repeats a whole id, and Table keeps it a small
// share of the ids (freshShare), so most ids cost what the leaves cost.
type fresh struct {
	// refs[i] is 1 + the offset in arena of keys[i]'s body; 0 an empty slot. Deletion
	// shifts back, so there are no tombstones.
	keys  []uint64
	refs  []uint32
	arena []byte
	ids   int
	// garbage is the bytes of arena no slot refers to any more: a body rewritten is
	// appended afresh.
	garbage int
}

const minSlots = 16

func newFresh() fresh {
	return fresh{keys: make([]uint64, minSlots), refs: make([]uint32, minSlots)}
}

func (f *fresh) bytes() int { return 12*len(f.keys) + cap(f.arena) }

func (f *fresh) home(id uint64) int {
	mask := len(f.keys) - 1
	return int((id*0x9E3779B97F4A7C15)>>(64-bits.Len(uint(mask)))) & mask
}

// slot returns where id is, or the empty slot where it would go.
func (f *fresh) slot(id uint64) (int, bool) {
	mask := len(f.keys) - 1
	for i := f.home(id); f.refs[i] != 0; i = (i + 1) & mask {
		if f.keys[i] == id {
			return i, true
		}
	}
	return 0, false
}

// insertSlot returns the empty slot where the absent id goes.
func (f *fresh) insertSlot(id uint64) int {
	mask := len(f.keys) - 1
	i := f.home(id)
	for f.refs[i] != 0 {
		i = (i + 1) & mask
	}
	return i
}

// body returns the body at slot i.
func (f *fresh) body(i int) []byte {
	off := int(f.refs[i] - 1)
	n, k := binary.Uvarint(f.arena[off:])
	return f.arena[off+k : off+k+int(n)]
}

// set writes body as id's, at slot i when it is there (found by slot), else as a new id.
func (f *fresh) set(i int, there bool, id uint64, body []byte) {
	if there {
		if old := f.body(i); len(old) == len(body) { // in place: no garbage
			copy(old, body)
			return
		}
		f.garbage += f.size(i)
	}
	off := len(f.arena)
	f.arena = append(binary.AppendUvarint(f.arena, uint64(len(body))), body...)
	if there {
		f.refs[i] = uint32(off + 1)
		return
	}
	i = f.insertSlot(id)
	f.keys[i], f.refs[i] = id, uint32(off+1)
	f.ids++
	if 4*f.ids > 3*len(f.keys) {
		f.rehash(2 * len(f.keys))
	}
}

// size is the bytes slot i's body takes in arena, its length included.
func (f *fresh) size(i int) int {
	n := len(f.body(i))
	return n + uvarintLen(n)
}

// delete empties slot i, shifting back the entries after it that probed past it.
func (f *fresh) delete(i int) {
	f.garbage += f.size(i)
	mask := len(f.keys) - 1
	f.ids--
	for j := (i + 1) & mask; f.refs[j] != 0; j = (j + 1) & mask {
		// Move j to i when its home is not in (i, j] cyclically.
		if home := f.home(f.keys[j]); (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			f.keys[i], f.refs[i] = f.keys[j], f.refs[j]
			i = j
		}
	}
	f.keys[i], f.refs[i] = 0, 0
}

func (f *fresh) rehash(size int) {
	keys, refs := f.keys, f.refs
	f.keys, f.refs = make([]uint64, size), make([]uint32, size)
	for i, r := range refs {
		if r != 0 {
			j := f.insertSlot(keys[i])
			f.keys[j], f.refs[j] = keys[i], r
		}
	}
}

// uvarintLen is the bytes binary.AppendUvarint takes for n.
func uvarintLen(n int) int { return (bits.Len64(uint64(n)|1)-1)/7 + 1 }
