package window

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// filled is a table and its model with n ids, each with up to 12 changes of 3 fields in
// the day before minute now, some of them negative, some below the floor.
func filled(seed uint64, n int, now uint32) (*Table, model) {
	r := rand.New(rand.NewPCG(seed, 1))
	t, m := New(), model{}
	for id := range uint64(n) {
		for range 1 + r.IntN(12) {
			c := Change{Minute: now - uint32(r.IntN(1440)), Field: uint8(r.IntN(3)), N: int64(r.IntN(20)) - 4}
			t.Add(1000+id*7, c)
			if c.N != 0 {
				m.add(1000+id*7, c)
			}
		}
	}
	t.SetFloor(now - 1200)
	return t, m
}

// topOf is the model's top: every id's sum, sorted.
func topOf(m model, f uint8, since, floor uint32, k int) []Ranked {
	var all []Ranked
	for id := range m {
		if n := m.sum(id, since, floor, 256)[f]; n > 0 {
			all = append(all, Ranked{ID: id, N: n})
		}
	}
	slices.SortFunc(all, rank)
	return all[:min(k, len(all))]
}

// TestTop: the top of every field over windows of 5 minutes to past the floor, for
// several k, is the model's exactly, ties by id.
func TestTop(t *testing.T) {
	const now = 29_000_000
	tbl, m := filled(1, 5000, now)
	for _, since := range []uint32{now - 4, now - 59, now - 1439, 0} {
		for f := range uint8(3) {
			for _, k := range []int{1, 10, 100, 10_000} {
				got, want := tbl.Top(f, since, k), topOf(m, f, since, tbl.Floor(), k)
				if !slices.Equal(got, want) {
					t.Fatalf("since %d, field %d, k %d: %d ranked, want %d; first %v, want %v", now-since, f, k, len(got), len(want), got[:min(3, len(got))], want[:min(3, len(want))])
				}
			}
		}
	}
	if got := tbl.Top(0, now, 0); got != nil {
		t.Errorf("k 0: %v", got)
	}
}

// TestMergeTops: partitions' tops merge into the top of their union.
func TestMergeTops(t *testing.T) {
	const now = 29_000_000
	whole, m := filled(2, 4000, now)
	parts := []*Table{New(), New(), New(), New()}
	for _, p := range parts {
		p.SetFloor(whole.Floor())
	}
	for id, cs := range m {
		for k, n := range cs {
			parts[id%4].Add(id, Change{Minute: k[1], Field: uint8(k[0]), N: n})
		}
	}
	for _, k := range []int{1, 50, 5000} {
		var lists [][]Ranked
		for _, p := range parts {
			lists = append(lists, p.Top(1, now-59, k))
		}
		if got, want := Merge(k, lists...), whole.Top(1, now-59, k); !slices.Equal(got, want) {
			t.Errorf("k %d: merged %v…, want %v…", k, got[:min(3, len(got))], want[:min(3, len(want))])
		}
	}
}

// BenchmarkTop is the top 100 of one field over an hour in a partition of 100 000 ids
// active in the last day, beside the same from a Go map of each id's changes (what a
// table without packing would hold).
func BenchmarkTop(b *testing.B) {
	const now = 29_000_000
	for _, n := range []int{10_000, 100_000} {
		tbl, _ := filled(3, n, now)
		byID := map[uint64][]Change{}
		tbl.each(func(id uint64, cs []Change) { byID[id] = slices.Clone(cs) })
		b.Run(fmt.Sprintf("table/%d", n), func(b *testing.B) {
			onCPU(b, func() {
				for range b.N {
					tbl.Top(1, now-59, 100)
				}
			})
		})
		b.Run(fmt.Sprintf("map/%d", n), func(b *testing.B) {
			onCPU(b, func() {
				for range b.N {
					h := make(worst, 0, 100)
					for id, cs := range byID {
						var s int64
						for _, c := range cs {
							if c.Field == 1 && c.Minute >= now-59 {
								s += c.N
							}
						}
						r := Ranked{ID: id, N: s}
						switch {
						case s <= 0:
						case len(h) < 100:
							heap.Push(&h, r)
						case rank(r, h[0]) < 0:
							h[0] = r
							heap.Fix(&h, 0)
						}
					}
					slices.SortFunc(h, rank)
				}
			})
		})
	}
}
