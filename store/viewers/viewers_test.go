package viewers

import (
	"math/rand/v2"
	"testing"

	"github.com/tally-dev/tally/pipeline/buildinfo"
	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/cold/coldtest"
	"github.com/tally-dev/tally/store/sketch"
)

func openDB(t testing.TB) *cold.DB { return coldtest.Open(t, cold.Options{}) }

// view is one view of a post by a user.
type view struct{ post, user uint64 }

// commit applies views in one transaction through cache, as the event stage does, and
// returns the counts it set; discard throws the transaction away instead.
func commit(t *testing.T, db *cold.DB, cache *Cache, views []view, discard bool) map[uint64]uint64 {
	t.Helper()
	txn := db.NewTxn(true)
	defer txn.Discard()
	v := New(0, cache)
	for _, x := range views {
		if err := v.Add(txn, x.post, x.user); err != nil {
			t.Fatal(err)
		}
	}
	set := map[uint64]uint64{}
	v.Counts(func(p, n uint64) { set[p] = n })
	if err := v.Flush(txn); err != nil {
		t.Fatal(err)
	}
	if discard {
		return set
	}
	if err := txn.Commit(); err != nil {
		t.Fatal(err)
	}
	cache.Keep(v)
	return set
}

func stored(t *testing.T, db *cold.DB, p uint64) uint64 {
	t.Helper()
	var n uint64
	if err := db.View(func(txn *cold.Txn) (err error) { n, _, err = Count(txn, 0, p); return err }); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestViewers: transactions of random views, some thrown away, read through a cache
// that forgets, a cache that keeps everything and none: every post's stored sketch, and
// the counts each transaction set, are those of a sketch of the views committed.
func TestViewers(t *testing.T) {
	rounds := 60
	if buildinfo.Race { // 31–37 s in CI at the full size
		rounds = 30
	}
	for name, cache := range map[string]*Cache{"none": nil, "small": NewCache(40_000), "large": NewCache(1 << 30)} {
		t.Run(name, func(t *testing.T) {
			db := openDB(t)
			r := rand.New(rand.NewPCG(1, 2))
			want := map[uint64]*sketch.Sketch{}
			last := map[uint64]uint64{} // the count each post was last set to
			for round := range rounds {
				discard := round%7 == 3
				views := make([]view, 1+r.IntN(2000))
				for i := range views {
					// a few posts with many viewers, many with few
					views[i] = view{post: uint64(1 + r.IntN(1+r.IntN(40))), user: uint64(r.IntN(20_000))}
				}
				set := commit(t, db, cache, views, discard)
				if discard {
					continue
				}
				for _, x := range views {
					if want[x.post] == nil {
						want[x.post] = &sketch.Sketch{}
					}
					want[x.post].Add(x.user)
				}
				for p, n := range set {
					last[p] = n
				}
				for p, s := range want {
					if n, _ := s.Count(); last[p] != n {
						t.Fatalf("round %d: post %d was last set to %d viewers, its sketch counts %d", round, p, last[p], n)
					}
				}
			}
			for p, s := range want {
				if got, want := stored(t, db, p), func() uint64 { n, _ := s.Count(); return n }(); got != want {
					t.Errorf("post %d: stored sketch counts %d, want %d", p, got, want)
				}
			}
			if cache != nil && cache.Bytes() > cache.max {
				t.Errorf("cache holds %d bytes, past its %d", cache.Bytes(), cache.max)
			}
		})
	}
}

// TestTransactionBounded: what a transaction writes grows with the views it applies,
// never with the sketches they change. A message of the most events a batch holds
// (10 000) fits in one transaction of the default database (which takes ~4.8 MB)
// whether its views go to as many posts each with its largest piece (32 users whose
// hashes share it), or ten each to 1 000 posts with a dense sketch (12 MB if each were
// written whole).
func TestTransactionBounded(t *testing.T) {
	const batch = 10_000 // pipeline.MaxBatch
	db := openDB(t)
	var crowded []uint64 // users whose hashes share a piece: 49 of them make a sketch dense
	for u := uint64(1); len(crowded) < 70; u++ {
		var s sketch.Sketch
		if s.Add(u) == 3 {
			crowded = append(crowded, u)
		}
	}
	const dense = 1 << 40 // the posts with dense sketches
	for from := uint64(0); from < batch; from += 1000 {
		var views []view
		for p := from; p < from+1000; p++ {
			for _, u := range crowded[:31] {
				views = append(views, view{p, u})
			}
			if p%10 == 0 {
				for _, u := range crowded[:50] {
					views = append(views, view{dense + p/10, u})
				}
			}
		}
		commit(t, db, nil, views, false)
	}
	for name, viewOf := range map[string]func(i uint64) view{
		"crowded pieces": func(i uint64) view { return view{i, crowded[31]} },
		"dense sketches": func(i uint64) view { return view{dense + i%1000, crowded[50+i/1000]} },
	} {
		txn := db.NewTxn(true)
		v := New(0, nil)
		for i := range uint64(batch) {
			if err := v.Add(txn, viewOf(i).post, viewOf(i).user); err != nil {
				t.Fatal(err)
			}
		}
		if err := v.Flush(txn); err != nil {
			t.Fatalf("%s: %d views in one transaction: %v", name, batch, err)
		}
		if err := txn.Commit(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if n := stored(t, db, 17); n != 32 {
		t.Errorf("post 17: %d viewers, want 32", n)
	}
	// Users chosen for sharing a piece are what the sketch counts worst: 60 of them in
	// 128 registers are an estimate of some 50, no better.
	if n := stored(t, db, dense+17); n < 40 || n > 80 {
		t.Errorf("a post of 60 viewers, dense: counted %d", n)
	}
}
