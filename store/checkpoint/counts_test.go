package checkpoint

import (
	"math"
	"testing"
)

// countsSize is the length of appendCounts' encoding, at every length a uvarint takes.
func TestCountsSize(t *testing.T) {
	var c []uint64
	for shift := range 64 {
		c = append(c, 1<<shift-1, 1<<shift)
	}
	c = append(c, 0, math.MaxUint64)
	for i := range c {
		if got, want := countsSize(c[i:i+1]), len(appendCounts(nil, c[i:i+1])); got != want {
			t.Fatalf("countsSize(%d) = %d, the encoding takes %d", c[i], got, want)
		}
	}
	if got, want := countsSize(c), len(appendCounts(nil, c)); got != want {
		t.Fatalf("countsSize of %d counts = %d, the encoding takes %d", len(c), got, want)
	}
}
