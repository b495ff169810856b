package counter

import (
	"math/rand/v2"
	"testing"

	"github.com/tally-dev/tally/store/cold"
)

// Every sequence is applied exactly once whatever order and however often it arrives,
// and Above stays empty once the gaps close.
func TestMarksExactlyOnce(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for round := range 200 {
		n := 1 + r.IntN(300)
		var arrivals []uint64
		for s := uint64(1); s <= uint64(n); s++ {
			for range 1 + r.IntN(3) { // re-sent up to twice
				arrivals = append(arrivals, s)
			}
		}
		// local reordering, as a retried publish produces
		for i := range arrivals {
			j := min(len(arrivals)-1, i+r.IntN(5))
			arrivals[i], arrivals[j] = arrivals[j], arrivals[i]
		}
		var m cold.Mark
		applied := map[uint64]int{}
		for _, s := range arrivals {
			if !seen(&m, s) {
				applied[s]++
				record(&m, s)
			}
		}
		for s := uint64(1); s <= uint64(n); s++ {
			if applied[s] != 1 {
				t.Fatalf("round %d: seq %d applied %d times", round, s, applied[s])
			}
		}
		if m.Through != uint64(n) || len(m.Above) != 0 {
			t.Fatalf("round %d: mark %+v after all %d", round, m, n)
		}
	}
}
