package cold_test

import (
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/delivery"
)

// TestCountRelations recounts a random set of relations against a model.
func TestCountRelations(t *testing.T) {
	db := open(t)
	rnd := rand.New(rand.NewPCG(1, 2))
	likes, comments := map[uint64]uint64{}, map[uint64]uint64{}
	followers, following := map[uint64]uint64{}, map[uint64]uint64{}
	likes1 := map[uint64]uint64{} // liked by users of partition 1
	part := func(id uint64) int { return int(id % 4) }
	err := db.Update(func(txn *cold.Txn) error {
		for i := range 600 {
			a, b := 1+rnd.Uint64N(20), 1+rnd.Uint64N(20)
			var k cold.Kind
			var r cold.Rel
			switch i % 3 {
			case 0:
				k, r = cold.Like, cold.Rel{A: a, B: b}
			case 1:
				k, r = cold.Comment, cold.Rel{A: a, B: b, C: rnd.Uint64N(3)}
			default:
				k, r = cold.Follow, cold.Rel{A: a, B: b}
			}
			changed, err := cold.Relate(txn, part(a), k, r, int64(i))
			if err != nil {
				return err
			}
			if !changed {
				continue
			}
			switch k {
			case cold.Like:
				likes[b]++
				if part(a) == 1 {
					likes1[b]++
				}
			case cold.Comment:
				comments[b]++
			default:
				followers[b]++
				following[a]++
				if err := cold.AddFollower(txn, part(b), r, int64(i)); err != nil {
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
	rc, err := cold.CountRelations(db, []int{0, 1, 2, 3}, ids, ids)
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
	sample, err := cold.SampleRelated(db, 1, cold.Like, false, 10, rnd.Uint64)
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
	if all, err := cold.SampleRelated(db, 1, cold.Like, false, 100, rnd.Uint64); err != nil || len(all) != len(likes1) {
		t.Errorf("sample of 100 = %v, %v; want all %d liked posts", all, err, len(likes1))
	}
	if got, err := cold.SampleRelated(open(t), 0, cold.Follow, true, 10, rnd.Uint64); err != nil || len(got) != 0 {
		t.Errorf("sample of an empty db = %v, %v", got, err)
	}
	if _, err := cold.SampleRelated(db, 0, cold.Comment, false, 1, rnd.Uint64); err == nil {
		t.Error("comments have no index to sample, want an error")
	}
}

// TestStageOutboxBounds: the last entry written and the oldest not deleted yet.
func TestStageOutboxBounds(t *testing.T) {
	db := open(t)
	check := func(wantLast, wantOldest uint64) {
		t.Helper()
		last, oldest, err := cold.StageOutbox(db, 3)
		if err != nil || last != wantLast || oldest != wantOldest {
			t.Fatalf("StageOutbox = %d, %d, %v; want %d, %d", last, oldest, err, wantLast, wantOldest)
		}
	}
	check(0, 0)
	update := func(fn func(txn *cold.Txn) error) {
		t.Helper()
		if err := db.Update(fn); err != nil {
			t.Fatal(err)
		}
	}
	update(func(txn *cold.Txn) error {
		for seq := uint64(1); seq <= 3; seq++ {
			if err := cold.PutOutbox(txn, 3, &delivery.OutboxEntry{Seq: seq, Subject: "s", MsgID: "m"}); err != nil {
				return err
			}
		}
		if err := cold.PutOutbox(txn, 4, &delivery.OutboxEntry{Seq: 1, Subject: "s", MsgID: "m"}); err != nil { // another partition
			return err
		}
		return cold.PutStage(txn, 3, &cold.StageState{Pos: 9, Outbox: 3, Seqs: map[string]uint64{"post.1": 2}})
	})
	check(3, 1)
	update(func(txn *cold.Txn) error { return cold.DeleteOutbox(txn, 3, []uint64{1, 2}) })
	check(3, 3)
	update(func(txn *cold.Txn) error { return cold.DeleteOutbox(txn, 3, []uint64{3}) })
	check(3, 0)
}

// TestStageHops: the hop batches a stage state says it sent and applied, read from the
// state PutStage writes (so a change of StageState's layout shows here), held batches
// above a gap not counted as applied.
func TestStageHops(t *testing.T) {
	db := open(t)
	sent, applied, err := cold.StageHops(db, 2)
	if err != nil || len(sent) != 0 || len(applied) != 0 {
		t.Fatalf("StageHops of no state = %v, %v, %v; want nothing", sent, applied, err)
	}
	st := &cold.StageState{Pos: 9, Seqs: map[string]uint64{"post.1": 2}, HopSeqs: map[uint32]uint64{0: 4, 3: 7},
		Hops: map[uint32]*delivery.Mark{0: {Through: 5, Held: []delivery.Held{{Seq: 7, Data: make([]byte, 1<<10)}}}, 1: {Through: 2}}}
	if err := db.Update(func(txn *cold.Txn) error { return cold.PutStage(txn, 2, st) }); err != nil {
		t.Fatal(err)
	}
	sent, applied, err = cold.StageHops(db, 2)
	if err != nil || !maps.Equal(sent, st.HopSeqs) || !maps.Equal(applied, map[uint32]uint64{0: 5, 1: 2}) {
		t.Fatalf("StageHops = %v, %v, %v; want sent %v, applied 0:5 1:2", sent, applied, err, st.HopSeqs)
	}
}
