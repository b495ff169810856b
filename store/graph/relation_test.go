package graph_test

import (
	"testing"

	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/cold/coldtest"
	"github.com/tally-dev/tally/store/graph"
)

func TestRelationsAndPaging(t *testing.T) {
	db := coldtest.Open(t, cold.Options{})
	update := func(fn func(txn *cold.Txn) (bool, error)) bool {
		t.Helper()
		var changed bool
		if err := db.Update(func(txn *cold.Txn) (err error) { changed, err = fn(txn); return err }); err != nil {
			t.Fatal(err)
		}
		return changed
	}
	for post := uint64(1); post <= 25; post++ {
		if !update(func(txn *cold.Txn) (bool, error) {
			return graph.Relate(txn, 2, graph.Like, graph.Rel{A: 7, B: post}, int64(post*10))
		}) {
			t.Fatalf("first like of %d changed nothing", post)
		}
	}
	if update(func(txn *cold.Txn) (bool, error) { return graph.Relate(txn, 2, graph.Like, graph.Rel{A: 7, B: 3}, 999) }) {
		t.Fatal("liking twice changed something")
	}
	if update(func(txn *cold.Txn) (bool, error) {
		c, _, err := graph.Unrelate(txn, 2, graph.Like, graph.Rel{A: 7, B: 99})
		return c, err
	}) {
		t.Fatal("unliking what was never liked changed something")
	}
	if !update(func(txn *cold.Txn) (bool, error) {
		c, _, err := graph.Unrelate(txn, 2, graph.Like, graph.Rel{A: 7, B: 20})
		return c, err
	}) {
		t.Fatal("unlike changed nothing")
	}
	liked, err := graph.Related(db, 2, graph.Like, 7, []uint64{1, 20, 25, 26})
	if err != nil || liked[0] != true || liked[1] || !liked[2] || liked[3] {
		t.Fatalf("Related = %v, %v", liked, err)
	}
	var got []uint64
	cursor := ""
	for page := 0; ; page++ {
		items, next, err := graph.List(db, 2, graph.Like, true, 7, 10, cursor)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range items {
			got = append(got, it.ID)
			if it.TS != int64(it.ID*10) {
				t.Fatalf("item %d has ts %d", it.ID, it.TS)
			}
		}
		if next == "" {
			break
		}
		cursor = next
	}
	if len(got) != 24 || got[0] != 25 || got[len(got)-1] != 1 {
		t.Fatalf("pages gave %v, want 25..1 newest first without 20", got)
	}
	for i := 1; i < len(got); i++ {
		if got[i] >= got[i-1] || got[i] == 20 {
			t.Fatalf("pages out of order or hold the unliked post: %v", got)
		}
	}
	items, _, err := graph.List(db, 2, graph.Like, false, 25, 10, "")
	if err != nil || len(items) != 1 || items[0].ID != 7 {
		t.Fatalf("likers of 25 = %v, %v", items, err)
	}
	if _, _, err := graph.List(db, 2, graph.Like, true, 7, 10, "zz"); err == nil {
		t.Fatal("a garbage cursor was accepted")
	}
}
