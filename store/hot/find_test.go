package hot

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// sealedGroup returns the table holding ids (in group 1, with fields counters each, the
// second at 1 or more) and the group that merging them made, with the ids sorted.
func sealedGroup(t *testing.T, ids []uint64, fields int) (*Table, *group, []uint64) {
	t.Helper()
	tb := New(fields)
	for _, id := range ids {
		tb.Add(1<<40|id&(1<<40-1), 1, 1)
	}
	tb.Compact()
	g := tb.groups[1]
	if g == nil {
		t.Fatal("no group")
	}
	ids = slices.Clone(ids)
	for i := range ids {
		ids[i] &= 1<<40 - 1
	}
	slices.Sort(ids)
	return tb, g, slices.Compact(ids)
}

// TestGroupFind checks find, and Get (which has its own copy of the search), in every form
// a group takes — run lengths, a fence of one slice a bucket, finer fences — against the
// sorted ids, for ids spread evenly, at random times, in bursts (most of a group in one
// bucket, or in one slice of its fence) and with empty buckets: every id is found at its
// place, and ids next to them and random ones are not found.
func TestGroupFind(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	even := func(n int) []uint64 {
		ids := make([]uint64, n)
		for i := range ids {
			ids[i] = uint64(i) * (1 << 40 / uint64(n))
		}
		return ids
	}
	random := func(n int) []uint64 {
		ids := make([]uint64, n)
		for i := range ids {
			ids[i] = r.Uint64N(1 << 40)
		}
		return ids
	}
	burst := func(n int, width uint64) []uint64 {
		ids := random(n / 2)
		at := r.Uint64N(1<<40 - width)
		for range n - n/2 {
			ids = append(ids, at+r.Uint64N(width))
		}
		return ids
	}
	for _, c := range []struct {
		name  string
		ids   []uint64
		shift int // the fence's slice width, or 0 for run lengths
	}{
		{"sparse", random(1000), 0},
		{"one id", []uint64{12345}, 0},
		{"id zero", []uint64{0, 1, 2}, 0},
		{"suffix extremes", []uint64{0, 1<<32 - 1, 1 << 32, 255<<32 | 1<<32 - 1}, 0},
		{"long run in a small group", burst(700, 1<<32), 32},
		{"medium", random(15000), 0},
		{"two slices a bucket", random(20000), 31},
		{"even", even(200_000), 28},
		{"random", random(200_000), 28},
		{"burst in a bucket", burst(200_000, 1<<32), 28},
		{"burst in a slice", burst(100_000, 1<<20), 29},
		{"half the buckets empty", random(50_000), 30},
	} {
		t.Run(c.name, func(t *testing.T) {
			ids := c.ids
			if c.name == "half the buckets empty" {
				for i := range ids {
					ids[i] &^= 1 << 39
				}
			}
			fields := 3 + len(c.name)%2 // Get's fast path takes three counters or four
			tb, g, sorted := sealedGroup(t, ids, fields)
			switch {
			case c.shift == 0 && g.cnt == nil:
				t.Fatalf("a group of %d ids has a fence, want run lengths", len(sorted))
			case c.shift != 0 && int(g.shift) != c.shift:
				t.Fatalf("a group of %d ids has slices of 2^%d keys (run lengths %v), want 2^%d",
					len(sorted), g.shift, g.cnt != nil, c.shift)
			}
			testFind(t, tb, g, sorted, r)
		})
	}
}

func testFind(t *testing.T, tb *Table, g *group, sorted []uint64, r *rand.Rand) {
	t.Helper()
	if g.size() != len(sorted) {
		t.Fatalf("group holds %d ids, want %d", g.size(), len(sorted))
	}
	dst := make([]uint64, tb.Fields())
	find := func(k uint64) int {
		i := g.find(uint8(k>>32), uint32(k))
		if got := tb.Get(1<<40|k, dst); got != (i >= 0) || (got && (dst[1] == 0 || dst[0]+dst[len(dst)-1] != 0)) {
			t.Fatalf("Get(%#x) = %v %v where find says %d", k, got, dst, i)
		}
		return i
	}
	for i, k := range sorted {
		if got := find(k); got != i {
			t.Fatalf("find(%#x) = %d, want %d", k, got, i)
		}
		for _, d := range []uint64{k - 1, k + 1} {
			if _, ok := slices.BinarySearch(sorted, d); !ok && d < 1<<40 {
				if got := find(d); got != -1 {
					t.Fatalf("find(%#x) of an absent id = %d", d, got)
				}
			}
		}
	}
	for range 10_000 {
		k := r.Uint64N(1 << 40)
		want, ok := slices.BinarySearch(sorted, k)
		if !ok {
			want = -1
		}
		if got := find(k); got != want {
			t.Fatalf("find(%#x) = %d, want %d", k, got, want)
		}
	}
}
