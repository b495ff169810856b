package sketch

import (
	"encoding/binary"
	"fmt"
)

// AppendBinary appends s as it is stored: nothing for the empty set; else its form, then
// for the exact form the count and the hashes' ascending differences, for the sparse
// form the count and each register's index difference and rank packed in one varint,
// for the dense form the packed registers. Equal sketches append equal bytes.
func (s *Sketch) AppendBinary(b []byte) ([]byte, error) {
	switch s.form {
	case 0:
		return b, nil
	case formExact:
		b = binary.AppendUvarint(append(b, byte(formExact)), uint64(len(s.exact)))
		prev := uint64(0)
		for _, h := range s.exact {
			b = binary.AppendUvarint(b, h-prev)
			prev = h
		}
	case formSparse:
		b = binary.AppendUvarint(append(b, byte(formSparse)), uint64(len(s.sparse)))
		prev := uint32(0)
		for _, e := range s.sparse {
			b = binary.AppendUvarint(b, uint64(e>>6-prev)<<6|uint64(e&63))
			prev = e >> 6
		}
	default:
		b = append(append(b, byte(formDense)), s.dense[:denseBytes]...)
	}
	return b, nil
}

// Unmarshal decodes what AppendBinary wrote, checking all of it: a damaged sketch is
// ErrCorrupt, never a sketch that counts wrong.
func Unmarshal(b []byte) (Sketch, error) {
	if len(b) == 0 {
		return Sketch{}, nil
	}
	f, b := form(b[0]), b[1:]
	switch f {
	case formExact, formSparse:
		n, k := binary.Uvarint(b)
		limit := uint64(ExactMax)
		if f == formSparse {
			limit = sparseMax
		}
		if k <= 0 || n == 0 || n > limit {
			return Sketch{}, fmt.Errorf("%w: %d entries in form %d", ErrCorrupt, n, f)
		}
		b = b[k:]
		s := Sketch{form: f}
		var prev uint64
		for i := range n {
			d, k := binary.Uvarint(b)
			if k <= 0 {
				return Sketch{}, fmt.Errorf("%w: entry %d of %d cut short", ErrCorrupt, i, n)
			}
			b = b[k:]
			if f == formExact {
				if (i > 0 && d == 0) || prev+d < prev {
					return Sketch{}, fmt.Errorf("%w: user %d not above the one before", ErrCorrupt, i)
				}
				prev += d
				s.exact = append(s.exact, prev)
				continue
			}
			idx, rank := prev+d>>6, d&63
			if (i > 0 && d>>6 == 0) || idx >= 1<<sparsePrecision || rank == 0 || rank > sparseMaxRank {
				return Sketch{}, fmt.Errorf("%w: register %d (entry %d) of rank %d", ErrCorrupt, idx, i, rank)
			}
			prev = idx
			s.sparse = append(s.sparse, uint32(idx<<6|rank))
		}
		if len(b) != 0 {
			return Sketch{}, fmt.Errorf("%w: %d bytes after the last entry", ErrCorrupt, len(b))
		}
		return s, nil
	case formDense:
		if len(b) != denseBytes {
			return Sketch{}, fmt.Errorf("%w: %d bytes of registers, want %d", ErrCorrupt, len(b), denseBytes)
		}
		s := Sketch{form: formDense, dense: make([]byte, denseBytes+1)}
		copy(s.dense, b)
		for i := range uint32(registers) {
			if s.get(i) > maxRank {
				return Sketch{}, fmt.Errorf("%w: register %d of rank %d", ErrCorrupt, i, s.get(i))
			}
		}
		return s, nil
	}
	return Sketch{}, fmt.Errorf("%w: unknown form %d", ErrCorrupt, f)
}
