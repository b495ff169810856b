package window

import (
	"encoding/binary"
	"fmt"
	"slices"
)

// Change is the net change of one field of an id in one minute.
type Change struct {
	Minute uint32
	Field  uint8
	N      int64
}

// AppendRecord appends the record of changes, which must be in (minute, field) order
// with no two of the same minute and field and no N of 0, to dst: the form a record has
// in the arena and in Badger.
func AppendRecord(dst []byte, changes []Change) []byte {
	var prev uint32
	for _, c := range changes {
		dst = binary.AppendUvarint(dst, uint64(c.Minute-prev))
		dst = append(dst, c.Field)
		dst = binary.AppendVarint(dst, c.N)
		prev = c.Minute
	}
	return dst
}

// DecodeRecord appends the changes of rec to dst; a damaged record is an error.
func DecodeRecord(dst []Change, rec []byte) ([]Change, error) {
	var prev uint64
	for len(rec) > 0 {
		d, k := binary.Uvarint(rec)
		if k <= 0 || len(rec) < k+1 || prev+d > 1<<32-1 {
			return dst, fmt.Errorf("%w: bad minute", ErrCorrupt)
		}
		prev += d
		field := rec[k]
		rec = rec[k+1:]
		n, k := binary.Varint(rec)
		if k <= 0 {
			return dst, fmt.Errorf("%w: bad change", ErrCorrupt)
		}
		rec = rec[k:]
		dst = append(dst, Change{Minute: uint32(prev), Field: field, N: n})
	}
	return dst, nil
}

// merge adds c to changes (ordered as AppendRecord wants), dropping those below floor
// and any that nets to 0.
func merge(changes []Change, c Change, floor uint32) []Change {
	changes = slices.DeleteFunc(changes, func(x Change) bool { return x.Minute < floor })
	if c.Minute < floor || c.N == 0 {
		return changes
	}
	i, found := slices.BinarySearchFunc(changes, c, func(a, b Change) int {
		if a.Minute != b.Minute {
			return int(int64(a.Minute) - int64(b.Minute))
		}
		return int(a.Field) - int(b.Field)
	})
	if !found {
		return slices.Insert(changes, i, c)
	}
	if changes[i].N += c.N; changes[i].N == 0 {
		return slices.Delete(changes, i, i+1)
	}
	return changes
}
