package window

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// active is n ids active in the last day as TestMemoryPerID makes them (snowflake-like,
// ascending, a few thousand apart), each with a change of field 0 in a random minute of
// the day before now, in a table.
func active(n int, now uint32) (*Table, []uint64) {
	r := rand.New(rand.NewPCG(5, 6))
	t := New()
	t.SetFloor(now - 1439)
	ids := make([]uint64, n)
	for i := range ids {
		ids[i] = 1<<50 + uint64(i)*4096 + uint64(r.IntN(4096))
		t.Add(ids[i], Change{Minute: now - uint32(r.IntN(1440)), N: 1})
	}
	t.Prune(nil)
	return t, ids
}

// activeMap is the same ids and changes in a Go map, made after the table's benchmarks
// so that the GC does not scan its million slices while they run.
func activeMap(t *Table) map[uint64][]Change {
	m := map[uint64][]Change{}
	t.each(func(id uint64, cs []Change) { m[id] = slices.Clone(cs) })
	return m
}

// mapAdd is Add on the unpacked form: an id's changes in a slice, in (minute, field)
// order, in a Go map.
func mapAdd(cs []Change, c Change, floor uint32) []Change { return merge(cs, c, floor) }

// BenchmarkAdd adds a change in the last hour (field 0 to 3, +1 or −1) to a random id
// of a table of n ids active in the last day: old ids (each change an id's first since
// the last Prune, the worst case for a table that keeps recent ids apart) and new ids
// (ascending, as snowflakes arrive), beside the same on a Go map of each id's changes.
func BenchmarkAdd(b *testing.B) {
	const now = 29_000_000
	for _, n := range []int{100_000, 1 << 20} {
		tbl, ids := active(n, now)
		r := rand.New(rand.NewPCG(7, 8))
		at := func(i int) Change {
			return Change{Minute: now - uint32(i%60), Field: uint8(i % 4), N: int64(i%2*2 - 1)}
		}
		order := r.Perm(n)
		last := ids[n-1]
		b.Run(fmt.Sprintf("table/old/%d", n), func(b *testing.B) {
			onCPU(b, func() {
				for i := range b.N {
					tbl.Add(ids[order[i%n]], at(i))
				}
			})
		})
		b.Run(fmt.Sprintf("table/new/%d", n), func(b *testing.B) {
			onCPU(b, func() {
				for i := range b.N {
					tbl.Add(last+uint64(i+1)*4096, at(i))
				}
			})
		})
		// Views: +1 to field 0 in the current minute of random ids, most of them
		// counted already in that minute (as a post's views are), so the change keeps
		// the body's length.
		tbl, _ = active(n, now)
		b.Run(fmt.Sprintf("table/views/%d", n), func(b *testing.B) {
			onCPU(b, func() {
				for i := range b.N {
					tbl.Add(ids[order[i%(n/8)]], Change{Minute: now, N: 1})
				}
			})
		})
		tbl, _ = active(n, now)
		m := activeMap(tbl)
		tbl = nil
		b.Run(fmt.Sprintf("map/old/%d", n), func(b *testing.B) {
			onCPU(b, func() {
				for i := range b.N {
					id := ids[order[i%n]]
					m[id] = mapAdd(m[id], at(i), now-1439)
				}
			})
		})
		b.Run(fmt.Sprintf("map/views/%d", n), func(b *testing.B) {
			onCPU(b, func() {
				for i := range b.N {
					id := ids[order[i%(n/8)]]
					m[id] = mapAdd(m[id], Change{Minute: now, N: 1}, now-1439)
				}
			})
		})
		b.Run(fmt.Sprintf("map/new/%d", n), func(b *testing.B) {
			onCPU(b, func() {
				for i := range b.N {
					id := last + uint64(i+1)*4096
					m[id] = mapAdd(m[id], at(i), now-1439)
				}
			})
		})
	}
}

// BenchmarkSum is a window query of one random id (its four fields over the last hour)
// in a table of n ids active in the last day, beside a Go map of each id's changes.
func BenchmarkSum(b *testing.B) {
	const now = 29_000_000
	for _, n := range []int{100_000, 1 << 20} {
		tbl, ids := active(n, now)
		order := rand.New(rand.NewPCG(9, 10)).Perm(n)
		out := make([]int64, 4)
		b.Run(fmt.Sprintf("table/%d", n), func(b *testing.B) {
			onCPU(b, func() {
				for i := range b.N {
					tbl.Sum(ids[order[i%n]], now-59, out)
				}
			})
		})
		m := activeMap(tbl)
		tbl = nil
		b.Run(fmt.Sprintf("map/%d", n), func(b *testing.B) {
			onCPU(b, func() {
				for i := range b.N {
					for _, c := range m[ids[order[i%n]]] {
						if c.Minute >= now-59 && int(c.Field) < len(out) {
							out[c.Field] += c.N
						}
					}
				}
			})
		})
	}
}
