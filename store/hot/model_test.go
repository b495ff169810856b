package hot_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/tally-dev/tally/pipeline/buildinfo"
	"github.com/tally-dev/tally/store"
	"github.com/tally-dev/tally/store/hot"
	"github.com/tally-dev/tally/store/storetest"
)

// TestModel drives the table and a store.Map with millions of mixed operations —
// increments, decrements to zero (tombstones), overflow values, sets, puts, bucket
// growth — and checks after each checkpoint that Dirty reported exactly what changed,
// that snapshots round-trip, and that compaction and bucket drops keep every count.
func TestModel(t *testing.T) {
	ops := 3_000_000
	if testing.Short() || buildinfo.Race {
		ops = 400_000
	}
	const fields = 4
	r := rand.New(rand.NewPCG(9, 10))
	tb, ref := hot.New(fields), store.NewMap(fields)
	checkpoint := store.NewMap(fields) // what a checkpoint built from Dirty holds
	ids := make([]uint64, 0, 1<<16)
	got := make([]uint64, fields)
	newID := func() uint64 {
		switch r.IntN(20) {
		case 0:
			return r.Uint64() >> 3 // not a snowflake (and older than all): still works
		case 1:
			return uint64(r.IntN(3)) // tiny ids, including 0
		}
		// Snowflakes whose time moves forward over the run (about 8 groups), a quarter
		// of them late: up to 10 minutes old, so they land in sealed groups.
		ms := uint64(1_700_000_000_000) + uint64(len(ids))*2_000_000/uint64(ops)
		if r.IntN(4) == 0 {
			ms -= uint64(r.IntN(600_000))
		}
		return ms<<22 | uint64(r.IntN(1<<22))
	}
	for i := range ops {
		var id uint64
		if len(ids) == 0 || r.IntN(3) == 0 {
			id = newID()
			ids = append(ids, id)
		} else {
			id = ids[r.IntN(len(ids))]
		}
		f := r.IntN(fields)
		switch op := r.IntN(100); {
		case op < 45:
			n := int64(1 + r.IntN(3))
			if r.IntN(200) == 0 {
				n = int64(r.IntN(1 << 20)) // past 16 bits: overflow
			}
			if g, w := tb.Add(id, f, n), ref.Add(id, f, n); g != w {
				t.Fatalf("op %d: Add(%d,%d,%d) = %d, want %d", i, id, f, n, g, w)
			}
		case op < 80:
			n := -int64(1 + r.IntN(4))
			if r.IntN(100) == 0 {
				n = -int64(r.IntN(1 << 21))
			}
			if g, w := tb.Add(id, f, n), ref.Add(id, f, n); g != w {
				t.Fatalf("op %d: Add(%d,%d,%d) = %d, want %d", i, id, f, n, g, w)
			}
		case op < 90:
			v := uint64(r.IntN(3))
			if r.IntN(20) == 0 {
				v = r.Uint64()
			}
			tb.Set(id, f, v)
			ref.Set(id, f, v)
		default:
			tb.Put(id, make([]uint64, fields))
			ref.Put(id, make([]uint64, fields))
		}
		if i%7919 == 0 { // between checkpoints, its dirty lists full
			checkMem(t, tb, "between checkpoints")
		}
		if i%100_000 == 99_999 {
			applyDirty(t, tb, checkpoint)
			checkMem(t, tb, "after a checkpoint")
			storetest.Equal(t, checkpoint, ref)
			if r.IntN(3) == 0 {
				roundTrip(t, tb)
				storetest.Equal(t, tb, ref)
			}
			if r.IntN(3) == 0 {
				tb.Compact()
				storetest.Equal(t, tb, ref)
				checkMem(t, tb, "after Compact")
			}
			if bks := tb.Buckets(); r.IntN(2) == 0 && len(bks) > 0 {
				// Moving a bucket to the cold tier: gone from the table, kept by the
				// checkpoint, not reported as deleted.
				bk := bks[r.IntN(len(bks))]
				tb.RangeBucket(bk, func(id uint64, _ []uint64) bool {
					ref.Put(id, make([]uint64, fields))
					return true
				})
				tb.DropBucket(bk)
				applyDirty(t, tb, checkpoint)
				checkpoint.Range(func(id uint64, _ []uint64) bool {
					if uint32(id>>32) == bk {
						checkpoint.Put(id, make([]uint64, fields))
					}
					return true
				})
				storetest.Equal(t, checkpoint, ref)
				checkMem(t, tb, "after DropBucket")
			}
			if gs := tb.Groups(); r.IntN(4) == 0 && len(gs) > 1 {
				// A group moved to the cold tier (the table is clean).
				gk := gs[r.IntN(len(gs))].Key
				applyDirty(t, tb, checkpoint) // clean, as the tier drops groups
				tb.Range(func(id uint64, _ []uint64) bool {
					if uint32(id>>40) == gk {
						ref.Put(id, make([]uint64, fields))
						checkpoint.Put(id, make([]uint64, fields))
					}
					return true
				})
				tb.DropGroup(gk)
				storetest.Equal(t, tb, ref)
				checkMem(t, tb, "after DropGroup")
			}
		}
		if g, w := tb.Get(id, got), ref.Get(id, make([]uint64, fields)); g != w {
			t.Fatalf("op %d: Get(%d) present %v, want %v", i, id, g, w)
		}
	}
	storetest.Equal(t, tb, ref)
	// The run went through every form of the index: it checked them all.
	tb.Compact()
	if runs, coarse, fine, far := hot.Layout(tb); runs == 0 || fine == 0 || far == 0 {
		t.Fatalf("groups indexed by runs %d, coarse fences %d, fine fences %d; %d outside the directory's window: a form was not exercised",
			runs, coarse, fine, far)
	}
	// Dropping a bucket removes exactly its ids.
	bks := tb.Buckets()
	drop := bks[len(bks)/2]
	tb.RangeBucket(drop, func(id uint64, _ []uint64) bool { ref.Put(id, make([]uint64, fields)); return true })
	tb.DropBucket(drop)
	storetest.Equal(t, tb, ref)
}

// checkMem checks that MemBytes's running total is what a walk of the table finds.
func checkMem(t *testing.T, tb *hot.Table, when string) {
	t.Helper()
	if got, want := tb.MemBytes(), hot.MemWalk(tb); got != want {
		t.Fatalf("%s: MemBytes %d, a walk of the table %d", when, got, want)
	}
}

// applyDirty applies what Dirty reports to a checkpoint copy, as a counter worker would.
func applyDirty(t *testing.T, tb *hot.Table, cp *store.Map) {
	t.Helper()
	tb.Dirty(func(id uint64, counts []uint64) bool {
		cp.Put(id, counts)
		return true
	})
	tb.ClearDirty()
	if n := hot.DirtyLeft(tb); n != 0 {
		t.Fatalf("%d buckets and groups still dirty after ClearDirty: changes the walk never listed", n)
	}
}

func roundTrip(t *testing.T, tb *hot.Table) {
	t.Helper()
	var buf bytes.Buffer
	n, err := tb.WriteTo(&buf)
	if err != nil || n != int64(buf.Len()) {
		t.Fatalf("WriteTo = %d, %v (buffer %d)", n, err, buf.Len())
	}
	if _, err := tb.ReadFrom(bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatalf("ReadFrom: %v", err)
	}
}

func TestSnapshotErrors(t *testing.T) {
	tb := hot.New(4)
	tb.Put(1<<40|7, []uint64{1, 2, 70000, 0})
	var buf bytes.Buffer
	if _, err := tb.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	good := buf.Bytes()
	f := func(name string, data []byte) {
		t.Helper()
		other := hot.New(4)
		other.Put(5, []uint64{1, 0, 0, 0})
		if _, err := other.ReadFrom(bytes.NewReader(data)); !errors.Is(err, hot.ErrSnapshot) {
			t.Fatalf("%s: err %v, want ErrSnapshot", name, err)
		}
		if got := make([]uint64, 4); other.Len() != 1 || !other.Get(5, got) || got[0] != 1 {
			t.Fatalf("%s: a failed load changed the table: %d ids", name, other.Len())
		}
	}
	f("empty", nil)
	f("truncated", good[:len(good)-5])
	flipped := bytes.Clone(good)
	flipped[len(flipped)-6] ^= 1
	f("flipped bit", flipped)
	f("wrong magic", append([]byte("XXXX"), good[4:]...))
	if _, err := hot.New(3).ReadFrom(bytes.NewReader(good)); !errors.Is(err, hot.ErrSnapshot) {
		t.Fatalf("fields mismatch: %v", err)
	}
	back := hot.New(4)
	if _, err := back.ReadFrom(bytes.NewReader(good)); err != nil {
		t.Fatal(err)
	}
	storetest.Equal(t, back, tb)
}

// No allocation per increment or insert once a bucket has room.
func TestNoAllocs(t *testing.T) {
	tb := hot.New(4)
	base := uint64(1_700_000_000_000) << 22
	for i := range 100_000 {
		tb.Add(base+uint64(i), 0, 1)
	}
	i := 0
	if a := testing.AllocsPerRun(10_000, func() { tb.Add(base+uint64(i%100_000), i%4, 1); i++ }); a != 0 {
		t.Fatalf("increment allocates %.1f times", a)
	}
	dst := make([]uint64, 4)
	if a := testing.AllocsPerRun(10_000, func() { tb.Get(base+uint64(i%100_000), dst); i++ }); a != 0 {
		t.Fatalf("lookup allocates %.1f times", a)
	}
}

// A table whose MemBytes nobody asks for through many checkpoints stops listing what to
// measure (its lists would grow for ever) and measures everything at the next call.
func TestMemBytesUnasked(t *testing.T) {
	tb := hot.New(2)
	for round := range 40 {
		for i := range 2_000 {
			tb.Add(uint64(400_000_000+round*2_000+i)<<32|1, 0, 1) // a bucket each
		}
		tb.Dirty(func(uint64, []uint64) bool { return true })
		tb.ClearDirty()
	}
	if !hot.MemStale(tb) {
		t.Fatal("80 000 buckets listed to measure: want the lists dropped")
	}
	checkMem(t, tb, "unasked through 40 checkpoints")
	tb.Add(1<<62, 1, 5)
	checkMem(t, tb, "asked again")
}
