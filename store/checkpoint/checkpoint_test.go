package checkpoint_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/tally-dev/tally/store/checkpoint"
	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/cold/coldtest"
	"github.com/tally-dev/tally/store/delivery"
)

func TestCountersCheckpoint(t *testing.T) {
	dir := t.TempDir()
	db, err := cold.Open(cold.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	cp := &checkpoint.Checkpoint{Pos: 42, Marks: map[uint32]*delivery.Mark{3: {Through: 7, Above: []uint64{9}}}}
	entries := []checkpoint.Entry{{ID: 1, Counts: []uint64{1, 0, 1 << 40, 0}}, {ID: 2, Counts: []uint64{5, 5, 5, 5}}}
	if err := checkpoint.SaveCounters(db, "post", 1, entries, cp, checkpoint.Journal{}); err != nil {
		t.Fatal(err)
	}
	if err := checkpoint.SaveCounters(db, "post", 1, []checkpoint.Entry{{ID: 2, Counts: make([]uint64, 4)}}, cp, checkpoint.Journal{}); err != nil {
		t.Fatal(err)
	}
	if err := checkpoint.SaveCounters(db, "post", 2, []checkpoint.Entry{{ID: 3, Counts: []uint64{1, 1, 1, 1}}}, &checkpoint.Checkpoint{Pos: 1}, checkpoint.Journal{}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	db, err = cold.Open(cold.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	got := map[uint64][]uint64{}
	if err := checkpoint.LoadCounters(db, "post", 1, 4, func(id uint64, c []uint64) { got[id] = append([]uint64(nil), c...) }); err != nil {
		t.Fatal(err)
	}
	back, err := checkpoint.LoadCheckpoint(db, "post", 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[1][2] != 1<<40 || back.Pos != 42 || back.Marks[3].Through != 7 || back.Marks[3].Above[0] != 9 || back.Seq != 2 {
		t.Fatalf("loaded %v %+v", got, back)
	}
	out := [][]uint64{make([]uint64, 4), make([]uint64, 4), {9, 9, 9, 9}}
	if err := checkpoint.Counts(db, "post", 1, []uint64{1, 2, 3}, out); err != nil {
		t.Fatal(err)
	}
	if out[0][2] != 1<<40 || out[1][0] != 0 || out[2][0] != 0 {
		t.Fatalf("cold reads: %v", out)
	}
}

// TestJournal appends checkpoints to the journal, drops the ones a snapshot covers, and
// reads back exactly the later ones, in order; a gap is an error, not a silent skip.
func TestJournal(t *testing.T) {
	db := coldtest.Open(t, cold.Options{})
	cp := &checkpoint.Checkpoint{Marks: map[uint32]*delivery.Mark{}}
	for i := range uint64(5) {
		j := checkpoint.Journal{Append: true}
		if i == 3 {
			j.DropThrough = 2 // a snapshot taken at checkpoint 2
		}
		e := []checkpoint.Entry{{ID: 100 + i, Counts: []uint64{i, 1}}, {ID: 7, Counts: []uint64{i, 0}}}
		if err := checkpoint.SaveCounters(db, "user", 0, e, cp, j); err != nil {
			t.Fatal(err)
		}
	}
	if cp.Seq != 5 || cp.JournalFrom != 3 {
		t.Fatalf("checkpoint %+v, want seq 5 journal from 3", cp)
	}
	var got []uint64
	last, err := checkpoint.LoadJournal(db, "user", 0, 2, 2, func(id uint64, c []uint64) { got = append(got, id, c[0], c[1]) })
	want := []uint64{102, 2, 1, 7, 2, 0, 103, 3, 1, 7, 3, 0, 104, 4, 1, 7, 4, 0}
	if err != nil || last != 5 || !slices.Equal(got, want) {
		t.Fatalf("journal after 2: last %d %v %v, want %v", last, err, got, want)
	}
	if _, err := checkpoint.LoadJournal(db, "user", 0, 2, 1, func(uint64, []uint64) {}); !errors.Is(err, cold.ErrCorrupt) {
		t.Fatalf("journal after 1 (dropped): %v, want ErrCorrupt", err)
	}
	if last, err := checkpoint.LoadJournal(db, "user", 0, 2, 5, func(uint64, []uint64) { t.Fatal("entry after the last") }); err != nil || last != 5 {
		t.Fatalf("journal after 5: %d %v", last, err)
	}
}

// TestFieldTakenOut: counters stored with five fields read with four (post's viewers
// counted, then tallyd started without --viewers) are an error that says so, never
// counts read into the wrong fields.
func TestFieldTakenOut(t *testing.T) {
	db := coldtest.Open(t, cold.Options{})
	var cp checkpoint.Checkpoint
	if err := checkpoint.SaveCounters(db, "post", 0, []checkpoint.Entry{{ID: 42, Counts: []uint64{1, 2, 3, 4, 5}}}, &cp, checkpoint.Journal{}); err != nil {
		t.Fatal(err)
	}
	err := checkpoint.LoadCounters(db, "post", 0, 4, func(uint64, []uint64) {})
	if err == nil || !strings.Contains(err.Error(), "taken out of the family") {
		t.Fatalf("five stored counters read as four: %v", err)
	}
	if err := checkpoint.LoadCounters(db, "post", 0, 6, func(id uint64, c []uint64) {
		if id != 42 || !slices.Equal(c, []uint64{1, 2, 3, 4, 5, 0}) {
			t.Errorf("id %d: %v, want the five and a new field at 0", id, c)
		}
	}); err != nil {
		t.Fatal(err)
	}
}
