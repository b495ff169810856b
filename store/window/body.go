package window

import "encoding/binary"

// A body is an id's changes as the table holds them in RAM: for each change, in
// (minute, field) order, a uvarint header of the minute's distance from the one before
// (from the table's epoch for the first) shifted left 3 and the field in the low bits
// (7: a field byte follows), then the change as a varint. A change of the hour in a
// table pruned in the last hour takes 3 bytes, where the stored record's form (an
// absolute minute, a field byte) takes 6: the form that reaches Badger stays
// AppendRecord's, so the checkpoints are what they were.

const fieldEscape = 7

// appendBody appends cs, in AppendRecord's order and none below epoch, to dst.
func appendBody(dst []byte, cs []Change, epoch uint32) []byte {
	prev := epoch
	for _, c := range cs {
		h := uint64(c.Minute-prev) << 3
		if c.Field < fieldEscape {
			dst = binary.AppendUvarint(dst, h|uint64(c.Field))
		} else {
			dst = append(binary.AppendUvarint(dst, h|fieldEscape), c.Field)
		}
		dst = binary.AppendVarint(dst, c.N)
		prev = c.Minute
	}
	return dst
}

// decodeBody appends the changes of body to dst. Bodies are checked when written (a
// stored record by DecodeRecord), so a body read back is whole.
func decodeBody(dst []Change, body []byte, epoch uint32) []Change {
	m := epoch
	for p := 0; p < len(body); {
		var c Change
		m, c.Field, c.N, p = next(body, p, m)
		c.Minute = m
		dst = append(dst, c)
	}
	return dst
}

// next reads the change at body[p:], whose minute before it was m: its minute, field
// and change, and where the next starts. The one-byte cases, most headers and changes,
// are read here, where the compiler inlines them.
func next(body []byte, p int, m uint32) (uint32, uint8, int64, int) {
	h := uint64(body[p])
	if h < 0x80 {
		p++
	} else {
		var k int
		h, k = uvarint2(body[p:])
		p += k
	}
	m += uint32(h >> 3)
	f := uint8(h & fieldEscape)
	if f == fieldEscape {
		f = body[p]
		p++
	}
	var n int64
	if b := body[p]; b < 0x80 {
		n = int64(b>>1) ^ -int64(b&1)
		p++
	} else {
		var k int
		n, k = binary.Varint(body[p:])
		p += k
	}
	return m, f, n, p
}

// sumBody adds to out[f] the changes of field f at or after minute since; fields past
// out are skipped.
func sumBody(body []byte, epoch, since uint32, out []int64) {
	m := epoch
	for p := 0; p < len(body); {
		var f uint8
		var n int64
		m, f, n, p = next(body, p, m)
		if m >= since && int(f) < len(out) {
			out[f] += n
		}
	}
}

// sumField is the net change of field f at or after minute since.
func sumField(body []byte, epoch, since uint32, f uint8) int64 {
	m := epoch
	var sum int64
	for p := 0; p < len(body); {
		var g uint8
		var n int64
		m, g, n, p = next(body, p, m)
		if g == f && m >= since {
			sum += n
		}
	}
	return sum
}
