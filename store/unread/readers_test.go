package unread

import (
	"testing"

	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/cold/coldtest"
	"github.com/tally-dev/tally/store/graph"
)

// TestReadersThroughResident: a reader state read and written by one committed
// transaction, then read by another, is resident once Keep has taken it in twice (the
// doorkeeper), and is then answered from RAM: the database changed behind its back
// (only the stage writes these keys) is not read. A transaction thrown away leaves
// nothing resident.
func TestReadersThroughResident(t *testing.T) {
	const p, owner = 3, 7
	db, res := coldtest.Open(t, cold.Options{}), graph.NewResident[ReaderState](1<<20)

	txn := db.NewTxn(true)
	rd := NewReaders(p, res)
	rs, err := rd.Get(txn, owner)
	if err != nil {
		t.Fatal(err)
	}
	rs.Like = 5
	rd.Put(owner, rs)
	if err := rd.Flush(txn, 1); err != nil {
		t.Fatal(err)
	}
	txn.Discard()
	if res.Bytes() != 0 {
		t.Fatalf("a discarded transaction left %d bytes resident", res.Bytes())
	}

	for range 2 { // seen twice: let in
		rd := NewReaders(p, res)
		err := db.Update(func(txn *cold.Txn) error {
			rs, err := rd.Get(txn, owner)
			if err != nil {
				return err
			}
			rs.Like = 5
			rd.Put(owner, rs)
			return rd.Flush(txn, 1)
		})
		if err != nil {
			t.Fatal(err)
		}
		res.Keep(rd.Seen(), nil)
	}
	if err := db.Update(func(txn *cold.Txn) error { return PutReader(txn, p, owner, ReaderState{Like: 9}) }); err != nil {
		t.Fatal(err)
	}
	hits := res.Hits
	err = db.View(func(txn *cold.Txn) error {
		rs, err := NewReaders(p, res).Get(txn, owner)
		if err != nil || rs.Like != 5 {
			t.Fatalf("reader %+v, want the resident one (%v)", rs, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Hits != hits+1 {
		t.Fatalf("%d resident hits, want %d", res.Hits, hits+1)
	}
}
