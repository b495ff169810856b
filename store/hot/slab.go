package hot

// slabs hand out the arrays of packed buckets from large shared chunks. A packed bucket
// never changes size, so its arrays need no room to grow, and carving them from a chunk
// avoids the allocator rounding each one up to its size class (about 5% of the table).
// A chunk is freed by the GC once no bucket uses it; a packed bucket that grows again
// (a late id) leaves a hole, which is rare for time-ordered ids.
type slabs struct {
	words []uint32
}

// A chunk is 2 MiB: it wastes less than one bucket at its end, and a table holds at most
// one chunk partly filled.
const chunk = 1 << 19 // words

func (s *slabs) bucket(size, fields int) *bucket {
	st := strideOf(fields)
	n := size * st
	if n > chunk/4 {
		return newBucket(size, fields) // big enough that rounding does not matter
	}
	if len(s.words) < n {
		s.words = make([]uint32, chunk)
	}
	b := &bucket{words: s.words[:n:n], stride: st, packed: true}
	s.words = s.words[n:]
	return b
}
