package pipeline

import (
	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// AppendChange appends c as reflection wrote it (a map of its non-empty fields, ids
// compact, counts as full uint64s), without reflection and, given room (Change.Size),
// without growing: a checkpoint announces every id it wrote.
func AppendChange(dst []byte, c *Change) []byte {
	n := 0
	for _, full := range [...]bool{len(c.IDs) > 0, len(c.Fields) > 0, len(c.Counts) > 0} {
		if full {
			n++
		}
	}
	dst = appendMapLen(dst, n)
	if len(c.IDs) > 0 {
		dst = appendArrayLen(appendString(dst, "ids"), len(c.IDs))
		for _, id := range c.IDs {
			dst = appendUint(dst, uint64(id))
		}
	}
	if len(c.Fields) > 0 {
		dst = appendArrayLen(appendString(dst, "fields"), len(c.Fields))
		for _, f := range c.Fields {
			dst = appendString(dst, f)
		}
	}
	if len(c.Counts) == 0 {
		return dst
	}
	return appendUintRows(appendString(dst, "counts"), c.Counts)
}

// appendUintRows appends rows as reflection writes a [][]uint64: a nil row as nil, each
// count as a full uint64 (Encoder.EncodeUint64).
func appendUintRows(dst []byte, rows [][]uint64) []byte {
	dst = appendArrayLen(dst, len(rows))
	for _, row := range rows {
		if row == nil {
			dst = append(dst, msgpcode.Nil)
			continue
		}
		dst = appendArrayLen(dst, len(row))
		for _, v := range row {
			dst = appendFixed(dst, msgpcode.Uint64, v, 8)
		}
	}
	return dst
}

// Size is at least the bytes c takes encoded (AppendChange).
func (c *Change) Size() int {
	n := 32 + 9*len(c.IDs)
	for _, f := range c.Fields {
		n += 5 + len(f)
	}
	for _, row := range c.Counts {
		n += 5 + 9*len(row)
	}
	return n
}

// EncodeMsgpack writes c as AppendChange does, for an Encoder.
func (c *Change) EncodeMsgpack(enc *msgpack.Encoder) error {
	_, err := enc.Writer().Write(AppendChange(make([]byte, 0, c.Size()), c))
	return err
}
