package graph_test

import (
	"math/rand/v2"
	"testing"

	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/cold/coldtest"
	"github.com/tally-dev/tally/store/graph"
)

// TestCountRelations recounts a random set of relations against a model.
func TestCountRelations(t *testing.T) {
	db := coldtest.Open(t, cold.Options{})
	rnd := rand.New(rand.NewPCG(1, 2))
	likes, comments := map[uint64]uint64{}, map[uint64]uint64{}
	followers, following := map[uint64]uint64{}, map[uint64]uint64{}
	likes1 := map[uint64]uint64{} // liked by users of partition 1
	part := func(id uint64) int { return int(id % 4) }
	err := db.Update(func(txn *cold.Txn) error {
		for i := range 600 {
			a, b := 1+rnd.Uint64N(20), 1+rnd.Uint64N(20)
			var k graph.Kind
			var r graph.Rel
			switch i % 3 {
			case 0:
				k, r = graph.Like, graph.Rel{A: a, B: b}
			case 1:
				k, r = graph.Comment, graph.Rel{A: a, B: b, C: rnd.Uint64N(3)}
			default:
				k, r = graph.Follow, graph.Rel{A: a, B: b}
			}
			changed, err := graph.Relate(txn, part(a), k, r, int64(i))
			if err != nil {
				return err
			}
			if !changed {
				continue
			}
			switch k {
			case graph.Like:
				likes[b]++
				if part(a) == 1 {
					likes1[b]++
				}
			case graph.Comment:
				comments[b]++
			default:
				followers[b]++
				following[a]++
				if err := graph.AddFollower(txn, part(b), r, int64(i)); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ids := []uint64{1, 5, 5, 20, 21} // 5 twice, 21 has nothing
	rc, err := graph.CountRelations(db, []int{0, 1, 2, 3}, ids, ids)
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		if rc.Likes[i] != likes[id] || rc.Comments[i] != comments[id] || rc.Followers[i] != followers[id] || rc.Following[i] != following[id] {
			t.Errorf("id %d: recount %d %d %d %d, want %d %d %d %d", id, rc.Likes[i], rc.Comments[i], rc.Followers[i], rc.Following[i],
				likes[id], comments[id], followers[id], following[id])
		}
	}
	// A sample is of one partition's lists: the posts liked by users of partition 1.
	sample, err := graph.SampleRelated(db, 1, graph.Like, false, 10, rnd.Uint64)
	if err != nil || len(sample) == 0 || len(sample) > 10 {
		t.Fatalf("sample = %v, %v", sample, err)
	}
	for _, id := range sample {
		if likes1[id] == 0 {
			t.Errorf("sampled post %d has no like in partition 1", id)
		}
	}
	if len(sample) != min(10, len(likes1)) {
		t.Errorf("sample %v: want 10 distinct of %d liked posts", sample, len(likes1))
	}
	if all, err := graph.SampleRelated(db, 1, graph.Like, false, 100, rnd.Uint64); err != nil || len(all) != len(likes1) {
		t.Errorf("sample of 100 = %v, %v; want all %d liked posts", all, err, len(likes1))
	}
	if got, err := graph.SampleRelated(coldtest.Open(t, cold.Options{}), 0, graph.Follow, true, 10, rnd.Uint64); err != nil || len(got) != 0 {
		t.Errorf("sample of an empty db = %v, %v", got, err)
	}
	if _, err := graph.SampleRelated(db, 0, graph.Comment, false, 1, rnd.Uint64); err == nil {
		t.Error("comments have no index to sample, want an error")
	}
}
