package stagelog_test

import (
	"maps"
	"testing"

	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/cold/coldtest"
	"github.com/tally-dev/tally/store/delivery"
	"github.com/tally-dev/tally/store/stagelog"
)

func TestStageOutbox(t *testing.T) {
	db := coldtest.Open(t, cold.Options{})
	st, out, err := stagelog.Load(db, 2)
	if err != nil || st.Pos != 0 || len(out) != 0 {
		t.Fatalf("fresh stage: %+v %v %v", st, out, err)
	}
	err = db.Update(func(txn *cold.Txn) error {
		for i := uint64(1); i <= 3; i++ {
			if err := stagelog.PutOutbox(txn, 2, &delivery.OutboxEntry{Seq: i, Subject: "s", MsgID: "m", Data: []byte{byte(i)}}); err != nil {
				return err
			}
		}
		return stagelog.Put(txn, 2, &stagelog.State{Pos: 9, Outbox: 3, Seqs: map[string]uint64{"post.1": 4}})
	})
	if err != nil {
		t.Fatal(err)
	}
	// Entry 3 is above what Badger holds (through 2): it is not deleted.
	if err := db.Update(func(txn *cold.Txn) error { return stagelog.DeleteOutbox(txn, 2, []uint64{1, 3}, 2) }); err != nil {
		t.Fatal(err)
	}
	st, out, err = stagelog.Load(db, 2)
	if err != nil || st.Pos != 9 || st.Seqs["post.1"] != 4 || len(out) != 2 || out[0].Seq != 2 || out[1].Data[0] != 3 {
		t.Fatalf("stage state %+v outbox %+v err %v", st, out, err)
	}
}

// TestLogKept: a state whose outbox is in the log keeps the record holding its oldest
// entry that may be unsent; one whose outbox is in Badger, its own.
func TestLogKept(t *testing.T) {
	for _, c := range []struct {
		st   stagelog.State
		want uint64
	}{
		{stagelog.State{Log: 9}, 9},
		{stagelog.State{Log: 9, Unsent: 4, UnsentLog: 5}, 5},
		{stagelog.State{Log: 9, Unsent: 4}, 0},
		{stagelog.State{Log: 9, Unsent: 4, UnsentLog: 9}, 9},
	} {
		if got := c.st.LogKept(); got != c.want {
			t.Errorf("%+v: LogKept %d, want %d", c.st, got, c.want)
		}
	}
}

// TestStageHops: the hop batches a stage state says it sent and applied, read from the
// state Put writes (so a change of State's layout shows here), held batches
// above a gap not counted as applied.
func TestStageHops(t *testing.T) {
	db := coldtest.Open(t, cold.Options{})
	sent, applied, err := stagelog.Hops(db, 2)
	if err != nil || len(sent) != 0 || len(applied) != 0 {
		t.Fatalf("Hops of no state = %v, %v, %v; want nothing", sent, applied, err)
	}
	st := &stagelog.State{Pos: 9, Seqs: map[string]uint64{"post.1": 2}, HopSeqs: map[uint32]uint64{0: 4, 3: 7},
		Hops: map[uint32]*delivery.Mark{0: {Through: 5, Held: []delivery.Held{{Seq: 7, Data: make([]byte, 1<<10)}}}, 1: {Through: 2}}}
	if err := db.Update(func(txn *cold.Txn) error { return stagelog.Put(txn, 2, st) }); err != nil {
		t.Fatal(err)
	}
	sent, applied, err = stagelog.Hops(db, 2)
	if err != nil || !maps.Equal(sent, st.HopSeqs) || !maps.Equal(applied, map[uint32]uint64{0: 5, 1: 2}) {
		t.Fatalf("Hops = %v, %v, %v; want sent %v, applied 0:5 1:2", sent, applied, err, st.HopSeqs)
	}
}
