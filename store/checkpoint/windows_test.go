package checkpoint

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/cold/coldtest"
	"github.com/tally-dev/tally/store/internal/keys"
)

// keysOf counts what db stores of id under (family, p)'s counter key and record keys.
func keysOf(t *testing.T, db *cold.DB, family string, p int, id uint64) (counter, windowed, v5 bool) {
	t.Helper()
	all := coldtest.All(t, db)
	_, counter = all[string(keys.Counters(family, p).U64(id))]
	_, windowed = all[string(windowedPrefix(family, p).U64(id))]
	_, v5 = all[string(recordsV5Prefix(family, p).U64(id))]
	return counter, windowed, v5
}

func stored(t *testing.T, db *cold.DB, id uint64) []uint64 {
	t.Helper()
	out := [][]uint64{make([]uint64, 4)}
	if err := Counts(db, "post", 1, []uint64{id}, out); err != nil {
		t.Fatal(err)
	}
	return out[0]
}

func loaded(t *testing.T, db *cold.DB) map[uint64][]uint64 {
	t.Helper()
	got := map[uint64][]uint64{}
	if err := LoadCounters(db, "post", 1, 4, func(id uint64, c []uint64) { got[id] = slices.Clone(c) }); err != nil {
		t.Fatal(err)
	}
	return got
}

func records(t *testing.T, db *cold.DB) map[uint64][]byte {
	t.Helper()
	got := map[uint64][]byte{}
	if err := LoadWindows(db, "post", 1, func(id uint64, rec []byte) error { got[id] = bytes.Clone(rec); return nil }); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestWindowedCounts: an id with a record keeps its counters with it, in one key, and
// they are the ones read — by a cold read and at a load — over the stale copy its
// counter key keeps; when its record empties they go back to the counter key, from RAM
// or, when RAM no longer holds them, from the record's key.
func TestWindowedCounts(t *testing.T) {
	db := coldtest.Open(t, cold.Options{})
	cp := &Checkpoint{}
	save := func(es ...Entry) {
		t.Helper()
		if err := SaveCheckpoint(db, "post", 1, es, cp, Journal{}, Changes{}); err != nil {
			t.Fatal(err)
		}
	}
	rec := []byte{0x81, 0x80, 0x0e, 0, 2} // a change of 2 in field 0 at minute 229 377
	save(Entry{ID: 7, Counts: []uint64{1, 0, 0, 0}}, Entry{ID: 8, Counts: []uint64{9, 0, 0, 0}})
	save(Entry{ID: 7, Counts: []uint64{3, 0, 0, 2}, Rec: rec})
	if c, w, _ := keysOf(t, db, "post", 1, 7); !c || !w {
		t.Fatalf("id 7 with a record: counter key %v, record key %v (want both: the counter key left as it was)", c, w)
	}
	if got := stored(t, db, 7); !slices.Equal(got, []uint64{3, 0, 0, 2}) {
		t.Fatalf("cold read of an id with a record: %v, want the record's [3 0 0 2]", got)
	}
	if got := loaded(t, db); !slices.Equal(got[7], []uint64{3, 0, 0, 2}) || !slices.Equal(got[8], []uint64{9, 0, 0, 0}) {
		t.Fatalf("loaded %v", got)
	}
	if got := records(t, db); len(got) != 1 || !bytes.Equal(got[7], rec) {
		t.Fatalf("records %v, want 7: %v", got, rec)
	}

	// Counts of zero stay with a record: the stale copy is not read.
	save(Entry{ID: 7, Counts: make([]uint64, 4), Rec: rec})
	if got := stored(t, db, 7); !slices.Equal(got, make([]uint64, 4)) {
		t.Fatalf("zero counts with a record read %v", got)
	}

	// The record empties while RAM holds the counters.
	save(Entry{ID: 7, Counts: []uint64{4, 0, 0, 0}, Left: true})
	if c, w, _ := keysOf(t, db, "post", 1, 7); !c || w {
		t.Fatalf("record emptied: counter key %v, record key %v (want the counter key alone)", c, w)
	}
	if got := stored(t, db, 7); !slices.Equal(got, []uint64{4, 0, 0, 0}) {
		t.Fatalf("after the record emptied: %v", got)
	}

	// The record empties while RAM no longer holds the counters: they move back.
	save(Entry{ID: 7, Counts: []uint64{5, 1, 0, 0}, Rec: rec})
	save(Entry{ID: 7, Left: true})
	if got, rs := stored(t, db, 7), records(t, db); !slices.Equal(got, []uint64{5, 1, 0, 0}) || len(rs) != 0 {
		t.Fatalf("moved back: %v, records %v", got, rs)
	}
	// ... and zeros move back as none.
	save(Entry{ID: 7, Counts: make([]uint64, 4), Rec: rec})
	save(Entry{ID: 7, Left: true})
	if c, w, _ := keysOf(t, db, "post", 1, 7); c || w {
		t.Fatalf("zeros moved back: counter key %v, record key %v (want neither)", c, w)
	}
	// An id that had no record stored: nothing to move, its counter key stays.
	save(Entry{ID: 8, Left: true})
	if got := stored(t, db, 8); !slices.Equal(got, []uint64{9, 0, 0, 0}) {
		t.Fatalf("an id without a record left: %v", got)
	}
}

// TestJournalLeavesOutCountsNotInRAM: the journal rebuilds the hot table, which holds
// no counters an entry left out (Counts nil).
func TestJournalLeavesOutCountsNotInRAM(t *testing.T) {
	db := coldtest.Open(t, cold.Options{})
	cp := &Checkpoint{}
	if err := SaveCheckpoint(db, "post", 1, []Entry{{ID: 1, Counts: []uint64{1, 0, 0, 0}}, {ID: 2, Left: true}}, cp, Journal{Append: true}, Changes{}); err != nil {
		t.Fatal(err)
	}
	var ids []uint64
	if _, err := LoadJournal(db, "post", 1, 4, 0, func(id uint64, _ []uint64) { ids = append(ids, id) }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids, []uint64{1}) {
		t.Fatalf("journaled %v, want [1]", ids)
	}
}

// TestMoveRecords: the records a tallyd of layout 5 stored apart from their counters
// move, in transactions of moveBatch, each to a key with its counters; the counter key
// is read no more for them, and a second call moves nothing.
func TestMoveRecords(t *testing.T) {
	db := coldtest.Open(t, cold.Options{})
	const n = 2*moveBatch + 10
	rec := func(id uint64) []byte { return []byte{0x81, 0x80, 0x0e, 0, byte(2 * (id%60 + 1))} }
	want := map[uint64][]uint64{}
	err := db.Update(func(txn *cold.Txn) error {
		for id := uint64(1); id <= n; id++ {
			if err := txn.Set(recordsV5Prefix("post", 1).U64(id), rec(id)); err != nil {
				return err
			}
			if id%3 == 0 {
				continue // counters of zero: no counter key
			}
			c := []uint64{id, 0, id % 7, 1}
			want[id] = c
			if err := txn.Set(keys.Counters("post", 1).U64(id), appendCounts(nil, c)); err != nil {
				return err
			}
		}
		// A partition beside it, and the checkpoint's own key, stay as they are.
		if err := txn.Set(recordsV5Prefix("post", 2).U64(1), rec(1)); err != nil {
			return err
		}
		return txn.Set(keys.Meta("post", 1), []byte{0x80})
	})
	if err != nil {
		t.Fatal(err)
	}
	moved, err := MoveRecords(db, "post", 1)
	if err != nil || moved != n {
		t.Fatalf("moved %d records (%v), want %d", moved, err, n)
	}
	if moved, err := MoveRecords(db, "post", 1); err != nil || moved != 0 {
		t.Fatalf("again: moved %d (%v), want 0", moved, err)
	}
	rs := records(t, db)
	for id := uint64(1); id <= n; id++ {
		if !bytes.Equal(rs[id], rec(id)) {
			t.Fatalf("record of %d: %v, want %v", id, rs[id], rec(id))
		}
		got, w := stored(t, db, id), want[id]
		if w == nil {
			w = make([]uint64, 4)
		}
		if !slices.Equal(got, w) {
			t.Fatalf("counts of %d: %v, want %v", id, got, w)
		}
	}
	for k := range coldtest.All(t, db) {
		if strings.HasPrefix(k, string(recordsV5Prefix("post", 1))) {
			t.Fatalf("a record still under the old key: %x", k)
		}
	}
	if _, _, v5 := keysOf(t, db, "post", 2, 1); !v5 {
		t.Fatal("another partition's record moved")
	}
	if len(rs) != n {
		t.Fatalf("%d records, want %d", len(rs), n)
	}
}
