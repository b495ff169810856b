package sketch

import (
	"fmt"
	"testing"
)

// TestBytesPerPost reports what a post's viewers cost, stored (AppendBinary) and in RAM,
// by how many distinct users viewed it, beside Redis' PFADD (12 KiB dense once its
// sparse form passes hll-sparse-max-bytes, 3 000 bytes by default) and beside keeping
// the users in a set (8 bytes each, before a set's own overhead). It fails when the
// dense form is not the largest a sketch gets.
func TestBytesPerPost(t *testing.T) {
	largest := 0
	for _, n := range []int{1, 10, 100, ExactMax, 1_000, 3_000, 10_000, 1_000_000} {
		s := of(users(uint64(n), n)...)
		b := marshal(t, s)
		largest = max(largest, len(b), s.Size())
		got, exact := s.Count()
		t.Logf("%9d viewers: stored %6d B (%5.2f B/viewer), RAM %6d B; counted %d (exact %v); a set of their ids %d B",
			n, len(b), float64(len(b))/float64(n), s.Size(), got, exact, 8*n)
	}
	if largest > denseBytes+1 {
		t.Errorf("a sketch took %d bytes, more than the dense form's %d", largest, denseBytes+1)
	}
}

// BenchmarkAdd is the cost of adding a viewer to a post in each form, beside adding it
// to a Go map used as a set (the exact answer's cost).
func BenchmarkAdd(b *testing.B) {
	for _, n := range []int{64, 1_000, 100_000} {
		us := users(1, n)
		b.Run(fmt.Sprintf("sketch/%d", n), func(b *testing.B) {
			b.ReportAllocs()
			var s Sketch
			for i := range b.N {
				s.Add(us[i%n])
			}
		})
		b.Run(fmt.Sprintf("map/%d", n), func(b *testing.B) {
			b.ReportAllocs()
			s := map[uint64]struct{}{}
			for i := range b.N {
				s[us[i%n]] = struct{}{}
			}
		})
	}
}

// BenchmarkCount is the cost of answering a post's viewers in each form.
func BenchmarkCount(b *testing.B) {
	for _, n := range []int{64, 1_000, 100_000} {
		s := of(users(1, n)...)
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				s.Count()
			}
		})
	}
}
