package cold

import (
	"testing"
)

// TestResidentKeepsOnlyWhatCommitted: what a transaction read and changed reaches the
// resident state only through Keep after its commit; a discarded transaction leaves
// it as it was, and a record a transaction changes is its own copy, never the resident
// one.
func TestResidentKeepsOnlyWhatCommitted(t *testing.T) {
	const p, owner, liker, post = 3, 7, 8, 100
	db, res := openDB(t), NewResident(1<<20)

	// A transaction that is thrown away: nothing of it is kept.
	txn := db.NewTxn(true)
	rd, l := NewReaders(p, res), NewLikes(p, res)
	rs, err := rd.Get(txn, owner)
	if err != nil {
		t.Fatal(err)
	}
	rs.Like = 5
	rd.Put(owner, rs)
	if _, err := l.like(txn, liker, post, 1, 1); err != nil {
		t.Fatal(err)
	}
	if err := rd.Flush(txn); err != nil {
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
	rd, l = NewReaders(p, res), NewLikes(p, res)
	err = db.Update(func(txn *Txn) error {
		rs, err := rd.Get(txn, owner)
		if err != nil || rs.Like != 0 {
			t.Fatalf("reader %+v after a discarded write (%v)", rs, err)
		}
		rs.Like = 5
		rd.Put(owner, rs)
		if changed, err := l.like(txn, liker, post, 1, 1); err != nil || !changed {
			t.Fatalf("like: changed %v, %v", changed, err)
		}
		if err := rd.Flush(txn); err != nil {
			return err
		}
		return l.Flush(txn, 1)
	})
	if err != nil {
		t.Fatal(err)
	}
	res.Keep(rd, l)
	if res.Bytes() != 0 {
		t.Fatalf("users seen once are resident: %d bytes", res.Bytes())
	}
	// Seen a second time (read from Badger), they are let in.
	rd, l = NewReaders(p, res), NewLikes(p, res)
	err = db.View(func(txn *Txn) error {
		if _, err := rd.Get(txn, owner); err != nil {
			return err
		}
		_, err := l.record(txn, liker)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	res.Keep(rd, l)
	hits := res.Hits
	// Badger changed behind the resident state's back (only the stage may write these
	// keys): the answer comes from RAM, which proves no read went to Badger.
	err = db.Update(func(txn *Txn) error { return PutReader(txn, p, owner, ReaderState{Like: 9}) })
	if err != nil {
		t.Fatal(err)
	}
	err = db.View(func(txn *Txn) error {
		rs, err := NewReaders(p, res).Get(txn, owner)
		if err != nil || rs.Like != 5 {
			t.Fatalf("reader %+v, want the resident one (%v)", rs, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
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
	db := openDB(t)
	for _, max := range []int{0, 100, 64 << 10} {
		res := NewResident(max)
		for round := range 20 {
			rd, l := NewReaders(p, res), NewLikes(p, res)
			err := db.Update(func(txn *Txn) error {
				for u := range uint64(200) {
					uid := uint64(round/2)*200 + u + 1 // each user in two rounds
					rd.Put(uid, ReaderState{Like: uid})
					if _, err := l.like(txn, uid, 1+u%7+uint64(round%2)*10, 1, uid*2+uint64(round%2)); err != nil {
						return err
					}
				}
				if err := rd.Flush(txn); err != nil {
					return err
				}
				return l.Flush(txn, uint64(round+1))
			})
			if err != nil {
				t.Fatal(err)
			}
			res.Keep(rd, l)
			if res.Bytes() > max || (max < minResident && res.Bytes() != 0) {
				t.Fatalf("budget %d: %d bytes resident", max, res.Bytes())
			}
		}
		if max == 64<<10 && res.Bytes() < max/2 {
			t.Fatalf("budget %d: only %d bytes resident", max, res.Bytes())
		}
	}
}
