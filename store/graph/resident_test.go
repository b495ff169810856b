package graph

import (
	"slices"
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

// TestHeavyLikesReadNothing: a heavy user a Resident keeps likes without a Badger read
// (its states are all in RAM, so a post they do not name has none stored), where each of
// its likes read its post's relation key before; after a restart, a new Resident reads
// its states in once it keeps the user again, and then none.
func TestHeavyLikesReadNothing(t *testing.T) {
	const p, u = 2, 9
	db := coldtest.Open(t, cold.Options{Upgrade: Upgrade})
	place := uint64(0)
	// batch likes posts in one committed transaction, and says how many Badger reads it made.
	batch := func(res *Resident[testReader], posts ...uint64) int64 {
		t.Helper()
		gets := badgerGets()
		l := NewLikes(p, res)
		err := db.Update(func(txn *cold.Txn) error {
			for _, post := range posts {
				place++
				if _, err := l.like(txn, u, post, int64(post), place); err != nil {
					return err
				}
			}
			return l.Flush(txn, place)
		})
		if err != nil {
			t.Fatal(err)
		}
		res.Keep(nil, l)
		return badgerGets() - gets
	}
	posts := func(from, n uint64) []uint64 {
		out := make([]uint64, n)
		for i := range out {
			out[i] = from + uint64(i)
		}
		return out
	}
	res := NewResident[testReader](1 << 20)
	batch(res, 1)
	batch(res, 2)                          // seen twice: resident
	batch(res, posts(3, maxLightLikes)...) // turns heavy
	if n := batch(res, append(posts(100, 50), 1, 40)...); n != 0 {
		t.Fatalf("50 likes of new posts and 2 again by a resident heavy user read Badger %d times, want none", n)
	}
	res = NewResident[testReader](1 << 20) // a restart
	for range 2 {                          // seen twice: resident
		batch(res, posts(200, 5)...)
	}
	batch(res, 300) // its states read in
	if n := batch(res, append(posts(400, 50), 100, 3)...); n != 0 {
		t.Fatalf("after a restart, 52 likes by a resident heavy user read Badger %d times, want none", n)
	}
	if min := 140 * likeCost; res.Bytes() < min {
		t.Fatalf("%d bytes resident for a user with 140 like states, want at least %d", res.Bytes(), min)
	}
	// A budget smaller than the user's states: they are not kept whole, and the likes
	// are read from Badger.
	small := NewResident[testReader](4 << 10)
	for i := range uint64(4) {
		batch(small, 500+i)
		if small.Bytes() > 4<<10 {
			t.Fatalf("%d bytes resident, budget %d", small.Bytes(), 4<<10)
		}
	}
	liked, err := Related(db, p, Like, u, []uint64{1, 40, 100, 149, 203, 449, 503, 450, 9999})
	if err != nil || !slices.Equal(liked, []bool{true, true, true, true, true, true, true, false, false}) {
		t.Fatalf("liked %v, %v", liked, err)
	}
}

func badgerGets() int64 { return cold.Counted().Gets }
