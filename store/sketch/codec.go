package sketch

import (
	"encoding/binary"
	"fmt"
	"slices"
)

// AppendChunk appends piece c of s as it is stored: nothing when the piece is empty
// (no user's hash starts with c); else the form, then for the exact form the count and
// the hashes' ascending differences, for the sparse form the count and each
// register's index difference and rank packed in one varint, for the dense form its
// 128 registers packed. At most MaxChunk bytes; equal sketches append equal pieces.
func (s *Sketch) AppendChunk(b []byte, c int) []byte {
	switch s.form {
	case formExact:
		lo, _ := slices.BinarySearch(s.exact, uint64(c)<<(64-chunkBits))
		hi := lo + s.inExact(c)
		if hi == lo {
			return b
		}
		b = binary.AppendUvarint(append(b, byte(formExact)), uint64(hi-lo))
		prev := uint64(c) << (64 - chunkBits)
		for _, h := range s.exact[lo:hi] {
			b = binary.AppendUvarint(b, h-prev)
			prev = h
		}
	case formSparse:
		lo, hi := s.sparseRange(c)
		if hi == lo {
			return b
		}
		b = binary.AppendUvarint(append(b, byte(formSparse)), uint64(hi-lo))
		prev := uint32(c) << (sparsePrecision - chunkBits)
		for _, e := range s.sparse[lo:hi] {
			b = binary.AppendUvarint(b, uint64(e>>6-prev)<<6|uint64(e&63))
			prev = e >> 6
		}
	case formDense:
		piece := s.dense[c*denseChunk : (c+1)*denseChunk]
		if !slices.ContainsFunc(piece, func(x byte) bool { return x != 0 }) {
			return b
		}
		b = append(append(b, byte(formDense)), piece...)
	}
	return b
}

// LoadChunk adds piece c, as AppendChunk wrote it, to s, which holds the pieces before
// it (a sketch is loaded piece by piece in ascending order, as they are stored). All of
// it is checked: a damaged piece is ErrCorrupt, never a sketch that counts wrong.
func (s *Sketch) LoadChunk(c int, b []byte) error {
	if c < 0 || c >= Chunks || len(b) == 0 {
		return fmt.Errorf("%w: piece %d of %d bytes", ErrCorrupt, c, len(b))
	}
	f, b := form(b[0]), b[1:]
	if s.form != 0 && f != s.form {
		return fmt.Errorf("%w: piece %d of form %d in a sketch of form %d", ErrCorrupt, c, f, s.form)
	}
	switch f {
	case formExact, formSparse:
		n, k := binary.Uvarint(b)
		limit, total := exactChunkMax, ExactMax-len(s.exact)
		if f == formSparse {
			limit, total = sparseChunkMax, sparseMax-len(s.sparse)
		}
		if k <= 0 || n == 0 || n > uint64(min(limit, total)) {
			return fmt.Errorf("%w: %d entries in piece %d of form %d", ErrCorrupt, n, c, f)
		}
		if (f == formExact && len(s.exact) > 0 && exactChunk(s.exact[len(s.exact)-1]) >= c) ||
			(f == formSparse && len(s.sparse) > 0 && sparseChunk(s.sparse[len(s.sparse)-1]>>6) >= c) {
			return fmt.Errorf("%w: piece %d after a later one", ErrCorrupt, c)
		}
		b = b[k:]
		s.form = f
		prev := uint64(c) << (64 - chunkBits)
		if f == formSparse {
			prev = uint64(c) << (sparsePrecision - chunkBits)
		}
		for i := range n {
			d, k := binary.Uvarint(b)
			if k <= 0 {
				return fmt.Errorf("%w: entry %d of %d of piece %d cut short", ErrCorrupt, i, n, c)
			}
			b = b[k:]
			if f == formExact {
				if (i > 0 && d == 0) || prev+d < prev || exactChunk(prev+d) != c {
					return fmt.Errorf("%w: user %d of piece %d out of order or out of the piece", ErrCorrupt, i, c)
				}
				prev += d
				s.exact = append(s.exact, prev)
				continue
			}
			idx, rank := prev+d>>6, d&63
			if (i > 0 && d>>6 == 0) || idx >= 1<<sparsePrecision || sparseChunk(uint32(idx)) != c || rank == 0 || rank > sparseMaxRank {
				return fmt.Errorf("%w: register %d (entry %d of piece %d) of rank %d", ErrCorrupt, idx, i, c, rank)
			}
			prev = idx
			s.sparse = append(s.sparse, uint32(idx<<6|rank))
		}
		if len(b) != 0 {
			return fmt.Errorf("%w: %d bytes after the last entry of piece %d", ErrCorrupt, len(b), c)
		}
	case formDense:
		if len(b) != denseChunk {
			return fmt.Errorf("%w: %d bytes of registers in piece %d, want %d", ErrCorrupt, len(b), c, denseChunk)
		}
		if s.form == 0 {
			s.form, s.dense = formDense, make([]byte, denseBytes+1)
		}
		copy(s.dense[c*denseChunk:], b)
		for i := range uint32(Chunks) {
			if r := s.get(uint32(c)*Chunks + i); r > maxRank {
				return fmt.Errorf("%w: register %d of rank %d", ErrCorrupt, uint32(c)*Chunks+i, r)
			}
		}
	default:
		return fmt.Errorf("%w: unknown form %d of piece %d", ErrCorrupt, f, c)
	}
	s.est = 0
	return nil
}
