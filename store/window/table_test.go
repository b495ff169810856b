package window

import (
	"math/rand/v2"
	"runtime"
	"testing"
)

// model is the reference: every change kept, by id, then (field, minute).
type model map[uint64]map[[2]uint32]int64

func (m model) add(id uint64, c Change) {
	if m[id] == nil {
		m[id] = map[[2]uint32]int64{}
	}
	m[id][[2]uint32{uint32(c.Field), c.Minute}] += c.N
}

func (m model) sum(id uint64, since, floor uint32, fields int) []int64 {
	out := make([]int64, fields)
	for k, n := range m[id] {
		if k[1] >= max(since, floor) {
			out[k[0]] += n
		}
	}
	return out
}

func TestSumWindows(t *testing.T) {
	const now = 29_000_000 // a Unix minute
	tb := New()
	tb.SetFloor(now - 1439)
	f := func(since uint32, want ...int64) {
		t.Helper()
		got := make([]int64, 2)
		tb.Sum(42, since, got)
		if got[0] != want[0] || got[1] != want[1] {
			t.Fatalf("since %d: got %v, want %v", since, got, want)
		}
	}
	tb.Add(42, Change{Minute: now - 1440, Field: 0, N: 1}) // a day ago: below the floor, costs nothing
	if tb.Len() != 0 {
		t.Fatalf("a change below the floor is kept: %d ids", tb.Len())
	}
	tb.Add(42, Change{Minute: now - 1439, Field: 0, N: 1}) // the oldest minute of the day
	tb.Add(42, Change{Minute: now - 5, Field: 0, N: 1})    // just outside 5 minutes
	tb.Add(42, Change{Minute: now - 4, Field: 0, N: 1})    // the oldest minute of 5
	tb.Add(42, Change{Minute: now, Field: 1, N: 3})
	tb.Add(42, Change{Minute: now, Field: 0, N: -1}) // an unlike at its own minute
	f(now-4, 0, 3)
	f(now-59, 1, 3)
	f(now-1439, 2, 3)
	// The floor moves on a minute: the oldest change leaves the day, and Prune frees it.
	tb.SetFloor(now - 1438)
	f(now-1439, 1, 3)
	tb.Prune(nil)
	f(now-1439, 1, 3)
	// A like and its unlike in the same minute net to nothing and leave no entry.
	tb.Add(7, Change{Minute: now, N: 1})
	tb.Add(7, Change{Minute: now, N: -1})
	if rec := tb.Record(nil, 7); len(rec) != 0 || tb.Len() != 1 {
		t.Fatalf("a net zero minute leaves %x, %d ids", rec, tb.Len())
	}
	// Everything below the floor: the id is gone, and Prune says so.
	tb.SetFloor(now + 1)
	var gone []uint64
	tb.Prune(func(id uint64) { gone = append(gone, id) })
	if tb.Len() != 0 || len(gone) != 1 || gone[0] != 42 {
		t.Fatalf("after the day: %d ids, gone %v", tb.Len(), gone)
	}
}

func TestTableMatchesModel(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	tb, m := New(), model{}
	const fields = 4
	floor := uint32(1000)
	tb.SetFloor(floor)
	for step := range 50_000 {
		id := uint64(r.IntN(3000)) // 0 is an id like any other
		c := Change{Minute: floor + uint32(r.IntN(60)), Field: uint8(r.IntN(fields)), N: int64(r.IntN(5)) - 2}
		tb.Add(id, c)
		if c.Minute >= floor {
			m.add(id, c)
		}
		switch {
		case step%5000 == 4999:
			floor += uint32(r.IntN(10))
			tb.SetFloor(floor)
			if r.IntN(2) == 0 {
				tb.Prune(nil)
			}
		case step%20000 == 19999: // a restart: every record stored and loaded again
			again := New()
			again.SetFloor(floor)
			for id := range uint64(3000) {
				if rec := tb.Record(nil, id); len(rec) > 0 {
					if _, err := again.Put(id, rec); err != nil {
						t.Fatal(err)
					}
				}
			}
			tb = again
		}
		if step%4999 == 0 {
			for id := range uint64(3000) {
				since := floor + uint32(r.IntN(70))
				got := make([]int64, fields)
				tb.Sum(id, since, got)
				if want := m.sum(id, since, floor, fields); !equal(got, want) {
					t.Fatalf("step %d id %d since %d: got %v, want %v", step, id, since, got, want)
				}
			}
		}
	}
}

func equal(a, b []int64) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return len(a) == len(b)
}

func TestDecodeRecordRefusesDamage(t *testing.T) {
	rec := AppendRecord(nil, []Change{{Minute: 29_000_000, Field: 1, N: -3}})
	for i := 1; i < len(rec); i++ {
		if _, err := DecodeRecord(nil, rec[:i]); err == nil {
			t.Fatalf("a record cut to %d of %d bytes decodes", i, len(rec))
		}
	}
}

// TestMemoryPerID measures the RAM of 1 M ids active in the last day, each with a
// change in a random minute of the day in each of its active fields and, for a quarter
// of them, an unlike in the last hour: the table's bytes and the Go heap's growth, per
// id per field, with one field active and with four (a post liked, reposted, commented
// and viewed).
func TestMemoryPerID(t *testing.T) {
	if testing.Short() {
		t.Skip("1 M ids")
	}
	for _, fields := range []int{1, 4} {
		const ids = 1 << 20
		const now = 29_000_000
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		tb := New()
		tb.SetFloor(now - 1439)
		r := rand.New(rand.NewPCG(3, 4))
		base := uint64(1) << 50
		for i := range uint64(ids) {
			id := base + i*4096 + uint64(r.IntN(4096))
			for f := range fields {
				tb.Add(id, Change{Minute: now - uint32(r.IntN(1440)), Field: uint8(f), N: 1})
			}
			if i%4 == 0 {
				tb.Add(id, Change{Minute: now - uint32(r.IntN(60)), N: -1})
			}
		}
		tb.Prune(nil) // the arena as a checkpointed table settles
		runtime.GC()
		runtime.ReadMemStats(&after)
		perField := float64(tb.Bytes()) / ids / float64(fields)
		heap := float64(after.HeapAlloc-before.HeapAlloc) / ids / float64(fields)
		t.Logf("1 M ids, %d field(s) each: table %.1f B per id per field, heap %.1f (goal 8)", fields, perField, heap)
		if perField > 40 {
			t.Fatalf("%.1f B per id per field", perField)
		}
		runtime.KeepAlive(tb)
	}
}
