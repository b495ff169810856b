package hot_test

import (
	"testing"

	"github.com/tally-dev/tally/store"
	"github.com/tally-dev/tally/store/hot"
	"github.com/tally-dev/tally/store/storetest"
)

// TestDropGroup drops whole groups, open and sealed, and checks that exactly their ids go,
// that Len, Groups and the touch stamps agree with a reference, and that the table keeps
// working (re-inserting a dropped id, snapshots) afterwards.
func TestDropGroup(t *testing.T) {
	tb, ref := hot.New(2), store.NewMap(2)
	put := func(id uint64, c ...uint64) { tb.Put(id, c); ref.Put(id, c) }
	for gk := uint64(1); gk <= 6; gk++ {
		for i := range uint64(300) {
			// Two buckets a group; group 6 stays open (the newest).
			put(gk<<40|(i%2)<<32|i*7919, i+1, i%3*70000)
		}
	}
	tb.SetTick(5)
	got := make([]uint64, 2)
	tb.Get(3<<40|0<<32|7919, got)
	tb.Add(6<<40|1<<32|1, 0, 1)
	ref.Add(6<<40|1<<32|1, 0, 1)
	groups := tb.Groups()
	if len(groups) != 6 {
		t.Fatalf("%d groups, want 6", len(groups))
	}
	for _, g := range groups {
		wantTouch := uint32(0)
		if g.Key == 3 || g.Key == 6 {
			wantTouch = 5
		}
		if g.Touched != wantTouch || g.Bytes <= 0 || g.IDs < 300 {
			t.Fatalf("group %+v, want touched %d", g, wantTouch)
		}
	}
	tb.ClearDirty()
	for _, gk := range []uint32{2, 6} {
		tb.DropGroup(gk)
		ref.Range(func(id uint64, _ []uint64) bool {
			if uint32(id>>40) == gk {
				ref.Put(id, make([]uint64, 2))
			}
			return true
		})
	}
	ref.ClearDirty()
	storetest.Equal(t, tb, ref)
	n := 0
	tb.Dirty(func(uint64, []uint64) bool { n++; return true })
	if n != 0 {
		t.Fatalf("dropping groups made %d ids dirty", n)
	}
	put(2<<40|5, 9, 0) // a dropped group comes back with one id
	put(7<<40|5, 1, 0)
	storetest.Equal(t, tb, ref)
	roundTrip(t, tb)
	storetest.Equal(t, tb, ref)
}

// An empty table makes a snapshot that loads.
func TestEmptySnapshot(t *testing.T) {
	tb := hot.New(3)
	roundTrip(t, tb)
	if tb.Len() != 0 {
		t.Fatalf("%d ids", tb.Len())
	}
}
