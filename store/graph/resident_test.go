package graph

import (
	"testing"

	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/cold/coldtest"
)

// testReader stands for store/unread's reader state, which a Resident keeps beside like
// records.
type testReader struct{ Like uint64 }

func (testReader) Cost() int { return 8 + 216 + 40 }

// TestResidentKeepsOnlyWhatCommitted: what a transaction read and changed reaches the
// resident state only through Keep after its commit; a discarded transaction leaves
// it as it was, and a record a transaction changes is its own copy, never the resident
// one.
func TestResidentKeepsOnlyWhatCommitted(t *testing.T) {
	const p, owner, liker, post = 3, 7, 8, 100
	db, res := coldtest.Open(t, cold.Options{Upgrade: Upgrade}), NewResident[testReader](1<<20)

	// A transaction that is thrown away: nothing of it is kept.
	txn := db.NewTxn(true)
	l := NewLikes(p, res)
	if _, err := l.like(txn, liker, post, 1, 1); err != nil {
		t.Fatal(err)
	}
	if err := l.Flush(txn, 1); err != nil {
		t.Fatal(err)
	}
	txn.Discard()
	if res.Bytes() != 0 {
		t.Fatalf("a discarded transaction left %d bytes resident", res.Bytes())
	}

	// The same, committed and kept: read from RAM afterwards.
	l = NewLikes(p, res)
	err := db.Update(func(txn *cold.Txn) error {
		if changed, err := l.like(txn, liker, post, 1, 1); err != nil || !changed {
			t.Fatalf("like: changed %v, %v", changed, err)
		}
		return l.Flush(txn, 1)
	})
	if err != nil {
		t.Fatal(err)
	}
	res.Keep(map[uint64]testReader{owner: {Like: 5}}, l)
	if res.Bytes() != 0 {
		t.Fatalf("users seen once are resident: %d bytes", res.Bytes())
	}
	// Seen a second time (read from Badger), they are let in.
	if _, ok := res.Reader(owner); ok {
		t.Fatal("a reader seen once is resident")
	}
	l = NewLikes(p, res)
	err = db.View(func(txn *cold.Txn) error {
		_, err := l.record(txn, liker)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	res.Keep(map[uint64]testReader{owner: {Like: 5}}, l)
	hits := res.Hits
	if rs, ok := res.Reader(owner); !ok || rs.Like != 5 {
		t.Fatalf("reader %+v (resident %v), want the one kept", rs, ok)
	}

	// An unlike in a transaction thrown away changes its own copy of the record.
	txn = db.NewTxn(true)
	if changed, _, err := NewLikes(p, res).unlike(txn, liker, post, 2); err != nil || !changed {
		t.Fatalf("unlike: changed %v, %v", changed, err)
	}
	txn.Discard()
	txn = db.NewTxn(true)
	defer txn.Discard()
	if changed, err := NewLikes(p, res).like(txn, liker, post, 1, 3); err != nil || changed {
		t.Fatalf("like again: changed %v (the resident record lost the like), %v", changed, err)
	}
	if res.Hits < hits+2 {
		t.Fatalf("%d resident hits, want at least %d", res.Hits, hits+2)
	}
}

// TestResidentBudget: the resident state stays within its budget whatever it is given,
// and a budget too small for one user keeps nothing.
func TestResidentBudget(t *testing.T) {
	const p = 1
	db := coldtest.Open(t, cold.Options{Upgrade: Upgrade})
	for _, max := range []int{0, 100, 64 << 10} {
		res := NewResident[testReader](max)
		for round := range 20 {
			rd, l := map[uint64]testReader{}, NewLikes(p, res)
			err := db.Update(func(txn *cold.Txn) error {
				for u := range uint64(200) {
					uid := uint64(round/2)*200 + u + 1 // each user in two rounds
					rd[uid] = testReader{Like: uid}
					if _, err := l.like(txn, uid, 1+u%7+uint64(round%2)*10, 1, uid*2+uint64(round%2)); err != nil {
						return err
					}
				}
				return l.Flush(txn, uint64(round+1))
			})
			if err != nil {
				t.Fatal(err)
			}
			res.Keep(rd, l)
			if res.Bytes() > max || (max < res.minResident() && res.Bytes() != 0) {
				t.Fatalf("budget %d: %d bytes resident", max, res.Bytes())
			}
		}
		if max == 64<<10 && res.Bytes() < max/2 {
			t.Fatalf("budget %d: only %d bytes resident", max, res.Bytes())
		}
	}
}
