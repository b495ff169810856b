package sketch

import (
	"fmt"
	"testing"
)

// TestBytesPerPost reports what a post's viewers cost, stored (the values of its
// pieces, each under its own key) and in RAM, by how many distinct users viewed it,
// beside Redis' PFADD (12 KiB dense once its sparse form passes hll-sparse-max-bytes,
// 3 000 bytes by default) and beside keeping the users in a set (8 bytes each, before a
// set's own overhead). It fails when a sketch takes more than the dense form, a form
// byte per piece included.
func TestBytesPerPost(t *testing.T) {
	for _, n := range []int{1, 10, 100, ExactMax, 1_000, 3_000, 10_000, 1_000_000} {
		s := of(users(uint64(n), n)...)
		stored, pieces := 0, 0
		for c := range Chunks {
			if p := s.AppendChunk(nil, c); len(p) > 0 {
				stored, pieces = stored+len(p), pieces+1
			}
		}
		got, exact := s.Count()
		t.Logf("%9d viewers: stored %6d B in %3d pieces (%5.2f B/viewer), RAM %6d B; counted %d (exact %v); a set of their ids %d B",
			n, stored, pieces, float64(stored)/float64(n), s.Size(), got, exact, 8*n)
		if stored > denseBytes+Chunks || s.Size() > denseBytes+1 {
			t.Errorf("%d viewers: %d bytes stored, %d in RAM: more than the dense form's %d", n, stored, s.Size(), denseBytes)
		}
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

// BenchmarkCount is the cost of answering a post's viewers in each form (a dense or
// sparse one counted again after each add: the worst case).
func BenchmarkCount(b *testing.B) {
	for _, n := range []int{64, 1_000, 100_000} {
		s := of(users(1, n)...)
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				s.est = 0
				s.Count()
			}
		})
	}
}
