package counter

import (
	"slices"

	"github.com/tally-dev/tally/store/cold"
)

// seen reports whether batch seq from a source was already applied.
func seen(m *cold.Mark, seq uint64) bool {
	return seq <= m.Through || slices.Contains(m.Above, seq)
}

// record marks seq applied. Through advances over every contiguous sequence, so Above
// holds only batches that arrived ahead of a gap (after a retried publish) and is
// almost always empty.
func record(m *cold.Mark, seq uint64) {
	if seq != m.Through+1 {
		m.Above = append(m.Above, seq)
		return
	}
	m.Through = seq
	for {
		i := slices.Index(m.Above, m.Through+1)
		if i < 0 {
			return
		}
		m.Through++
		m.Above = slices.Delete(m.Above, i, i+1)
	}
}
