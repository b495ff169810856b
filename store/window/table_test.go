package window

import (
	"cmp"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"github.com/tally-dev/tally/pipeline/buildinfo"
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
		case step%5000 == 4999:
			floor += uint32(r.IntN(10))
			tb.SetFloor(floor)
			if r.IntN(2) == 0 {
				tb.Prune(nil)
			}
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

// TestEveryStep checks every change against the model as it is added, over more ids
// than fresh holds before the leaves are rebuilt with them (minFresh), so that ids move
// from the leaves to fresh and back many times, as the floor moves on; the records and
// the top too, now and then.
func TestEveryStep(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	tb, m := New(), model{}
	// Fields past 6 take a byte of their own in a body, changes past ±63 more than one,
	// and the few hot ids bodies longer than 127 bytes.
	const ids, fields = 8 * minFresh, 9
	floor := uint32(1000)
	tb.SetFloor(floor)
	for step := range 200_000 {
		// Ids mostly ascending, as snowflakes arrive, some of them old.
		id := uint64(step/8) * 3
		switch r.IntN(10) {
		case 0, 1, 2, 3, 4:
			id = uint64(r.IntN(ids)) * 3
		case 5:
			id = uint64(r.IntN(16)) * 3
		}
		if step%30_000 == 29_999 { // the day moves on, and now and then a Prune
			floor += 5
			tb.SetFloor(floor)
			if step%60_000 == 59_999 {
				tb.Prune(nil)
			}
		}
		c := Change{Minute: floor + uint32(r.IntN(60)), Field: uint8(r.IntN(fields)), N: int64(r.IntN(5)) - 2}
		if r.IntN(10) == 0 {
			c.N *= 1000
		}
		tb.Add(id, c)
		m.add(id, c)
		got, since := make([]int64, fields), floor+uint32(r.IntN(60))
		tb.Sum(id, since, got)
		if want := m.sum(id, since, floor, fields); !equal(got, want) {
			t.Fatalf("step %d id %d: got %v, want %v", step, id, got, want)
		}
		if step%20_000 == 19_999 {
			for id := range m {
				if got, want := tb.Record(nil, id), AppendRecord(nil, merge(toChanges(m[id]), Change{}, floor)); string(got) != string(want) {
					t.Fatalf("step %d id %d: record %x, want %x", step, id, got, want)
				}
			}
			if got, want := tb.Top(8, floor+30, 50), topOf(m, 8, floor+30, floor, 50); !slices.Equal(got, want) {
				t.Fatalf("step %d: top %v, want %v", step, got, want)
			}
		}
	}
}

// toChanges is an id's changes in the model, in (minute, field) order, none of 0.
func toChanges(byKey map[[2]uint32]int64) []Change {
	var cs []Change
	for k, n := range byKey {
		if n != 0 {
			cs = append(cs, Change{Minute: k[1], Field: uint8(k[0]), N: n})
		}
	}
	slices.SortFunc(cs, func(a, b Change) int {
		return cmp.Or(cmp.Compare(a.Minute, b.Minute), cmp.Compare(a.Field, b.Field))
	})
	return cs
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

// TestMemoryPerID measures the RAM of 0.75 M and 1 M ids active in the last day, each
// with a change in a random minute of the day in each of its active fields and, for a
// quarter of them, an unlike in the last hour, 2^12 apart (1 M ids in a partition's
// second of snowflakes) or 2^30: the table's bytes and the Go heap's growth, per id per
// field, with one field active and with four (a post liked, reposted, commented and
// viewed). The ids come in order, as snowflakes do, or shuffled
// (every id out of order: the most fresh holds); settled is after a Prune, the form a
// table has most of the time, and the most on the way is what fresh and the leaves'
// slack add before a rebuild.
func TestMemoryPerID(t *testing.T) {
	if testing.Short() || buildinfo.Race {
		t.Skip("1 M ids, and a memory figure: not under -short or -race")
	}
	f := func(ids, fields int, apart uint64, shuffled bool, want float64) {
		t.Helper()
		const now = 29_000_000
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		tb := New()
		tb.SetFloor(now - 1439)
		r := rand.New(rand.NewPCG(3, 4))
		base := uint64(1) << 50
		order := make([]uint64, ids)
		for i := range order {
			order[i] = base + uint64(i)*apart + r.Uint64N(apart)
		}
		if shuffled {
			r.Shuffle(ids, func(i, j int) { order[i], order[j] = order[j], order[i] })
		}
		var peak float64 // the most bytes an id per field on the way, past 64 Ki ids
		for i, id := range order {
			for f := range fields {
				tb.Add(id, Change{Minute: now - uint32(r.IntN(1440)), Field: uint8(f), N: 1})
			}
			if i%4 == 0 {
				tb.Add(id, Change{Minute: now - uint32(r.IntN(60)), N: -1})
			}
			if i >= 1<<16 && i%512 == 0 {
				peak = max(peak, float64(tb.Bytes())/float64(i+1)/float64(fields))
			}
		}
		order = nil
		tb.Prune(nil) // the table as a checkpointed table settles
		runtime.GC()
		runtime.ReadMemStats(&after)
		settled := float64(tb.Bytes()) / float64(ids) / float64(fields)
		heap := float64(after.HeapAlloc-before.HeapAlloc) / float64(ids) / float64(fields)
		t.Logf("%.2f M ids 2^%d apart, %d field(s), %s: settled %.1f B per id per field (heap %.1f), at most %.1f on the way (goal 8)",
			float64(ids)/(1<<20), bits.Len64(apart)-1, fields, map[bool]string{false: "in order", true: "shuffled"}[shuffled], settled, heap, peak)
		if settled > want || heap > want+0.5 {
			t.Errorf("settled %.1f B per id per field (heap %.1f), want at most %.1f", settled, heap, want)
		}
		if peak > 1.4*want {
			t.Errorf("%.1f B per id per field on the way, want at most %.1f", peak, 1.4*want)
		}
		runtime.KeepAlive(tb)
	}
	// The old table, an id table of 12-byte slots beside the records, took 32.0 and
	// 10.7 B settled at 1 M ids (just past its growth to 2 M slots), 21.4 and 8.0 at
	// 0.75 M.
	for _, ids := range []int{3 << 18, 1 << 20} {
		f(ids, 1, 4096, false, 8)
		f(ids, 4, 4096, false, 4.5)
		f(ids, 1, 4096, true, 8)
		f(ids, 4, 4096, true, 4.5)
	}
	// Sparser ids: a partition of 16 holding 1 M of 16 M ids made over three days
	// (snowflakes, 2^22 a millisecond) has them 2^30 apart, 5 bytes of distance where
	// 2^12 takes 2.
	f(1<<20, 1, 1<<30, false, 11)
	f(1<<20, 4, 1<<30, false, 5.5)
}

// TestWorth: an id rewritten again and again leaves garbage until Worth asks for a
// Prune, which frees it.
func TestWorth(t *testing.T) {
	tb := New()
	tb.SetFloor(1000)
	for id := range uint64(100) {
		tb.Add(id*7, Change{Minute: 1000, N: 1})
	}
	for i := 0; !tb.Worth(); i++ {
		if i > 100_000 {
			t.Fatal("100 000 rewrites, and no Prune is worth it")
		}
		tb.Add(uint64(i%50)*7, Change{Minute: 1001 + uint32(i%300), N: 1})
	}
	tb.Prune(nil)
	if tb.Worth() || tb.Len() != 100 {
		t.Fatalf("pruned: worth %v, %d ids", tb.Worth(), tb.Len())
	}
}

// TestFarIDs: ids far past the others (a counter's ids are not all snowflakes) are
// found through the leaves' heads where dir's marks stop, before a Prune and after it,
// when the marks span them all.
func TestFarIDs(t *testing.T) {
	tb, m := New(), model{}
	tb.SetFloor(1000)
	add := func(id uint64, n int64) {
		c := Change{Minute: 1000 + uint32(id%50), Field: uint8(id % 3), N: n}
		tb.Add(id, c)
		m.add(id, c)
	}
	var ids []uint64
	for i := range uint64(5000) {
		ids = append(ids, 1<<40+i*7)
	}
	for i := range uint64(3000) {
		ids = append(ids, 1<<60+i*1_000_003)
	}
	for _, id := range ids {
		add(id, 1)
	}
	check := func(when string) {
		t.Helper()
		for _, id := range ids {
			for _, id := range []uint64{id, id + 1, id - 1} {
				got := make([]int64, 3)
				tb.Sum(id, 1000, got)
				if want := m.sum(id, 1000, 1000, 3); !equal(got, want) {
					t.Fatalf("%s: id %d: got %v, want %v", when, id, got, want)
				}
			}
		}
	}
	check("appended")
	for i := 0; i < len(ids); i += 3 { // older ids rewritten: fresh, and rebuilds
		add(ids[i], 2)
	}
	check("rewritten")
	tb.Prune(nil)
	check("pruned")
}
