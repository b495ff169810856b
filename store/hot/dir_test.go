package hot

import (
	"math/rand/v2"
	"testing"
)

// TestDirectory adds and removes groups in the orders a table sees — time moving on,
// old groups leaving for the cold tier, ids that are not snowflakes, a far outlier — and
// checks after every step that every key finds its group or none, and that the window
// holds most groups when they are dense.
func TestDirectory(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, c := range []struct {
		name  string
		next  func(i int) uint32
		drop  bool // drop the oldest groups as time moves on
		dense bool
	}{
		{"time order", func(i int) uint32 { return 1_000_000 + uint32(i) }, false, true},
		{"time order with gaps", func(i int) uint32 { return 1_000_000 + uint32(i)*3 }, false, true},
		{"moving window", func(i int) uint32 { return 1_000_000 + uint32(i) }, true, true},
		{"random", func(int) uint32 { return r.Uint32N(1 << 24) }, false, false},
		{"outlier first", func(i int) uint32 {
			if i == 0 {
				return 1<<24 - 1
			}
			return 5_000 + uint32(i)
		}, false, true},
		{"mixed", func(i int) uint32 {
			if i%10 == 0 {
				return r.Uint32N(1 << 24)
			}
			return 2_000_000 + uint32(i)
		}, true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var d directory
			all := map[uint32]*group{}
			var order []uint32
			check := func() {
				t.Helper()
				for gk, g := range all {
					if got := lookup(&d, all, gk); got != g {
						t.Fatalf("group %d: found %p, want %p", gk, got, g)
					}
				}
				for range 100 {
					gk := r.Uint32N(1 << 24)
					if got := lookup(&d, all, gk); got != all[gk] {
						t.Fatalf("absent group %d found", gk)
					}
				}
				if d.in+d.far != len(all) {
					t.Fatalf("%d groups in the window and %d outside, want %d in all", d.in, d.far, len(all))
				}
			}
			for i := range 3000 {
				gk := c.next(i)
				if all[gk] != nil {
					continue
				}
				g := &group{}
				all[gk] = g
				d.add(gk, g, all)
				order = append(order, gk)
				if c.drop && len(order) > 500 {
					old := order[0]
					order = order[1:]
					delete(all, old)
					d.del(old)
				}
				if i%97 == 0 {
					check()
				}
			}
			check()
			if c.dense && d.far > len(all)/5 {
				t.Fatalf("%d of %d groups outside the window", d.far, len(all))
			}
			if c.dense && len(d.win) > 8*len(all)+64 {
				t.Fatalf("a window of %d slots for %d groups", len(d.win), len(all))
			}
		})
	}
}

func lookup(d *directory, all map[uint32]*group, gk uint32) *group {
	g, far := d.get(gk)
	if far {
		g = all[gk]
	}
	return g
}
