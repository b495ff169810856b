package storetest

import (
	"math/rand/v2"
	"testing"

	"github.com/tally-dev/tally/store"
)

// New makes an empty table with the given number of counters per id.
type New func(fields int) store.Table

// Run runs the whole conformance suite against tables made by newTable.
func Run(t *testing.T, newTable New) {
	t.Run("Contract", func(t *testing.T) { testContract(t, newTable) })
	t.Run("Model", func(t *testing.T) { testModel(t, newTable, 200_000) })
}

func testContract(t *testing.T, newTable New) {
	tb := newTable(4)
	dst := make([]uint64, 4)
	if tb.Get(7, dst) || tb.Len() != 0 {
		t.Fatalf("empty table: Get(7) present or Len=%d", tb.Len())
	}
	check := func(id uint64, want ...uint64) {
		t.Helper()
		ok := tb.Get(id, dst)
		zero := true
		for i := range want {
			if want[i] != 0 {
				zero = false
			}
			if dst[i] != want[i] {
				t.Fatalf("Get(%d) = %v, want %v", id, dst, want)
			}
		}
		if ok == zero {
			t.Fatalf("Get(%d) present=%v, want %v", id, ok, !zero)
		}
	}
	if v := tb.Add(7, 1, 3); v != 3 {
		t.Fatalf("Add = %d, want 3", v)
	}
	check(7, 0, 3, 0, 0)
	if v := tb.Add(7, 1, -5); v != 0 {
		t.Fatalf("Add below zero = %d, want 0", v)
	}
	check(7, 0, 0, 0, 0)
	if tb.Len() != 0 {
		t.Fatalf("all-zero entry kept: Len=%d", tb.Len())
	}
	tb.Add(7, 0, -1)
	check(7, 0, 0, 0, 0)
	big := uint64(1)<<40 + 5
	tb.Set(8, 3, big)
	tb.Add(8, 3, 70000)
	check(8, 0, 0, 0, big+70000)
	tb.Add(8, 3, -int64(big))
	check(8, 0, 0, 0, 70000)
	tb.Put(9, []uint64{1, 65535, 65536, 1 << 63})
	check(9, 1, 65535, 65536, 1<<63)
	tb.Put(9, []uint64{0, 0, 0, 0})
	check(9, 0, 0, 0, 0)
	if tb.Len() != 1 {
		t.Fatalf("Len=%d, want 1", tb.Len())
	}
	var seen int
	tb.Range(func(id uint64, c []uint64) bool {
		seen++
		if id != 8 || c[3] != 70000 {
			t.Fatalf("Range gave %d %v", id, c)
		}
		return true
	})
	if seen != 1 {
		t.Fatalf("Range saw %d ids, want 1", seen)
	}
	// Dirty reports what changed since ClearDirty; a deleted id comes with zeros.
	tb.ClearDirty()
	tb.Add(10, 0, 4)
	tb.Put(8, []uint64{0, 0, 0, 0})
	dirty := map[uint64][]uint64{}
	tb.Dirty(func(id uint64, c []uint64) bool { dirty[id] = append([]uint64(nil), c...); return true })
	if len(dirty) != 2 || dirty[10][0] != 4 || dirty[8] == nil || !allZero(dirty[8]) {
		t.Fatalf("Dirty = %v, want 10:[4 0 0 0] and 8 deleted", dirty)
	}
	tb.ClearDirty()
	tb.Dirty(func(id uint64, _ []uint64) bool { t.Fatalf("Dirty after ClearDirty reported %d", id); return false })
}

func allZero(c []uint64) bool {
	for _, v := range c {
		if v != 0 {
			return false
		}
	}
	return true
}

// testModel applies ops random operations to the table and to a store.Map and compares.
func testModel(t *testing.T, newTable New, ops int) {
	const fields = 4
	r := rand.New(rand.NewPCG(1, 2))
	tb, ref := newTable(fields), store.NewMap(fields)
	ids := make([]uint64, 0, 50_000)
	got, want := make([]uint64, fields), make([]uint64, fields)
	pick := func() uint64 {
		if len(ids) == 0 || r.IntN(4) == 0 {
			// snowflake-like: time in the high bits, a few random spread buckets
			id := uint64(r.IntN(8))<<40 | uint64(r.Uint32())
			if r.IntN(10) == 0 {
				id = r.Uint64()
			}
			ids = append(ids, id)
			return id
		}
		return ids[r.IntN(len(ids))]
	}
	for i := range ops {
		id, f := pick(), r.IntN(fields)
		switch op := r.IntN(10); {
		case op < 5:
			n := int64(r.IntN(3) + 1)
			if r.IntN(100) == 0 {
				n = int64(r.IntN(1 << 20))
			}
			if g, w := tb.Add(id, f, n), ref.Add(id, f, n); g != w {
				t.Fatalf("op %d: Add(%d,%d,%d)=%d want %d", i, id, f, n, g, w)
			}
		case op < 8:
			n := -int64(r.IntN(3) + 1)
			if g, w := tb.Add(id, f, n), ref.Add(id, f, n); g != w {
				t.Fatalf("op %d: Add(%d,%d,%d)=%d want %d", i, id, f, n, g, w)
			}
		case op < 9:
			v := uint64(r.IntN(3))
			if r.IntN(50) == 0 {
				v = r.Uint64()
			}
			tb.Set(id, f, v)
			ref.Set(id, f, v)
		default:
			c := []uint64{0, 0, 0, 0}
			if r.IntN(2) == 0 {
				c[r.IntN(fields)] = uint64(r.IntN(100000))
			}
			tb.Put(id, c)
			ref.Put(id, c)
		}
		if g, w := tb.Get(id, got), ref.Get(id, want); g != w || !equal(got, want) {
			t.Fatalf("op %d: Get(%d)=%v,%v want %v,%v", i, id, got, g, want, w)
		}
	}
	Equal(t, tb, ref)
}

// Equal fails t unless tb and ref hold exactly the same ids and counters.
func Equal(t *testing.T, tb, ref store.Table) {
	t.Helper()
	if tb.Len() != ref.Len() {
		t.Fatalf("Len=%d want %d", tb.Len(), ref.Len())
	}
	got := make([]uint64, ref.Fields())
	n := 0
	ref.Range(func(id uint64, want []uint64) bool {
		n++
		if !tb.Get(id, got) || !equal(got, want) {
			t.Fatalf("id %d: %v want %v", id, got, want)
		}
		return true
	})
	m := 0
	tb.Range(func(uint64, []uint64) bool { m++; return true })
	if m != n {
		t.Fatalf("Range saw %d ids want %d", m, n)
	}
}

func equal(a, b []uint64) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
