package counter

import (
	"slices"

	"github.com/tally-dev/tally/store/cold"
)

// seen reports whether batch seq from a source was already applied, or is in a range
// never to be applied (see cold.Rebase).
func seen(m *cold.Mark, seq uint64) bool {
	if seq <= m.Through || slices.Contains(m.Above, seq) {
		return true
	}
	for _, r := range m.Skip {
		if seq >= r[0] && seq <= r[1] {
			return true
		}
	}
	return false
}

// skip moves Through over a skipped range that starts right after it and forgets the
// ranges it has passed.
func skip(m *cold.Mark) {
	for moved := true; moved; {
		moved = false
		for _, r := range m.Skip {
			if r[0] == m.Through+1 {
				m.Through, moved = r[1], true
			}
		}
	}
	m.Skip = slices.DeleteFunc(m.Skip, func(r [2]uint64) bool { return r[1] <= m.Through })
}

// record marks seq applied. Through advances over every contiguous sequence, so Above
// holds only batches that arrived ahead of a gap (after a retried publish) and is
// almost always empty.
func record(m *cold.Mark, seq uint64) {
	skip(m)
	if seq != m.Through+1 {
		m.Above = append(m.Above, seq)
		return
	}
	m.Through = seq
	for {
		skip(m)
		i := slices.Index(m.Above, m.Through+1)
		if i < 0 {
			return
		}
		m.Through++
		m.Above = slices.Delete(m.Above, i, i+1)
	}
}
