package graph

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/cold/coldtest"
	"github.com/tally-dev/tally/store/internal/keys"
	"github.com/tally-dev/tally/store/rel"
)

// likeModel is what the likes of one partition should answer: each user's likes, post
// to the time of the like.
type likeModel struct {
	likes   map[uint64]map[uint64]int64
	touched map[uint64]map[uint64]bool // the posts each user liked or unliked
	heavy   map[uint64]bool            // users who touched more than maxLightLikes posts
}

func newLikeModel() *likeModel {
	return &likeModel{likes: map[uint64]map[uint64]int64{}, touched: map[uint64]map[uint64]bool{}, heavy: map[uint64]bool{}}
}

// clone is a copy of m that m's changes leave as it is.
func (m *likeModel) clone() *likeModel {
	c := newLikeModel()
	for u, ls := range m.likes {
		c.likes[u] = maps.Clone(ls)
	}
	for u, ps := range m.touched {
		c.touched[u] = maps.Clone(ps)
	}
	c.heavy = maps.Clone(m.heavy)
	return c
}

func (m *likeModel) touch(u, post uint64) {
	if m.touched[u] == nil {
		m.touched[u] = map[uint64]bool{}
	}
	m.touched[u][post] = true
	if len(m.touched[u]) > maxLightLikes {
		m.heavy[u] = true
	}
}

func (m *likeModel) like(u, post uint64, ts int64) bool {
	m.touch(u, post)
	if m.likes[u] == nil {
		m.likes[u] = map[uint64]int64{}
	}
	if _, ok := m.likes[u][post]; ok {
		return false
	}
	m.likes[u][post] = ts
	return true
}

func (m *likeModel) unlike(u, post uint64) (int64, bool) {
	m.touch(u, post)
	ts, ok := m.likes[u][post]
	delete(m.likes[u], post)
	return ts, ok
}

// like and unlike toggle through a batch at place, as the event stage does, and say
// what changed.
func (l *Likes) like(txn *cold.Txn, u, post uint64, ts int64, place uint64) (changed bool, err error) {
	before, after, _, err := l.Toggle(txn, u, post, true, rel.Event{Place: place, TS: ts})
	return after.On && !before.On, err
}

func (l *Likes) unlike(txn *cold.Txn, u, post uint64, place uint64) (changed bool, since int64, err error) {
	before, after, _, err := l.Toggle(txn, u, post, false, rel.Event{Place: place})
	return before.On && !after.On, before.Made.TS, err
}

// list is a list newest first, then by id.
func modelList(m map[uint64]int64) []Item {
	var out []Item
	for id, ts := range m {
		out = append(out, Item{ID: id, TS: ts})
	}
	slices.SortFunc(out, func(a, b Item) int {
		return cmp.Or(cmp.Compare(b.TS, a.TS), cmp.Compare(a.ID, b.ID))
	})
	return out
}

func badgerPuts() int64 { return cold.Counted().Writes }

func sameItem(a, b Item) bool { return a.ID == b.ID && a.TS == b.TS }

// checkLikes compares every answer about the likes of partition p with the model's:
// liked, both lists read in pages of random sizes, the likers counted, and both samples.
func checkLikes(t *testing.T, db *cold.DB, p int, m *likeModel, users, posts uint64, r *rand.Rand) {
	t.Helper()
	likers := map[uint64]map[uint64]int64{}
	for u, ls := range m.likes {
		for post, ts := range ls {
			if likers[post] == nil {
				likers[post] = map[uint64]int64{}
			}
			likers[post][u] = ts
		}
	}
	all := make([]uint64, posts)
	for i := range all {
		all[i] = uint64(i + 1)
	}
	page := func(bySubject bool, id uint64) []Item {
		var got []Item
		for cur := ""; ; {
			items, next, err := List(db, p, Like, bySubject, id, 1+r.IntN(7), cur)
			if err != nil {
				t.Fatal(err)
			}
			for _, it := range items {
				got = append(got, Item{ID: it.ID, TS: it.TS})
			}
			if next == "" {
				return got
			}
			cur = next
		}
	}
	for u := uint64(1); u <= users; u++ {
		liked, err := Related(db, p, Like, u, all)
		if err != nil {
			t.Fatal(err)
		}
		for i, post := range all {
			if _, want := m.likes[u][post]; liked[i] != want {
				t.Fatalf("user %d liked %d: %v, want %v", u, post, liked[i], want)
			}
		}
		if got, want := page(true, u), modelList(m.likes[u]); !slices.EqualFunc(got, want, sameItem) {
			t.Fatalf("likes of user %d:\n got %v\nwant %v", u, got, want)
		}
	}
	rc, err := CountRelations(db, []int{p}, all, nil)
	if err != nil {
		t.Fatal(err)
	}
	var likedPosts, likingUsers []uint64
	for i, post := range all {
		if got, want := page(false, post), modelList(likers[post]); !slices.EqualFunc(got, want, sameItem) {
			t.Fatalf("likers of post %d:\n got %v\nwant %v", post, got, want)
		}
		if rc.Likes[i] != uint64(len(likers[post])) {
			t.Fatalf("post %d counted %d likers, want %d", post, rc.Likes[i], len(likers[post]))
		}
		if len(likers[post]) > 0 {
			likedPosts = append(likedPosts, post)
		}
	}
	for u := uint64(1); u <= users; u++ {
		if len(m.touched[u]) > 0 { // a like record (or heavy keys), tombstones too
			likingUsers = append(likingUsers, u)
		}
	}
	for _, c := range []struct {
		bySubject bool
		want      []uint64
	}{{false, likedPosts}, {true, likingUsers}} {
		got, err := SampleRelated(db, p, Like, c.bySubject, 1000, r.Uint64)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Sort(got); !slices.Equal(got, c.want) {
			t.Fatalf("sample (by subject %v) %v, want %v", c.bySubject, got, c.want)
		}
	}
}

// TestLikesMatchModel likes and unlikes at random, in batches of random sizes (and one
// at a time through Relate and Unrelate), with times that tie and share seconds and
// users that turn heavy, and checks every answer against the model after each round.
// The batches read through a Resident as the event stage's do — small enough to forget
// users on the way, or large enough to keep the heavy users' states — which is now and
// then started afresh (a restart), and some of their transactions are thrown away.
func TestLikesMatchModel(t *testing.T) {
	for _, budget := range []int{8 << 10, 1 << 20} {
		for seed := range uint64(4) {
			likesMatchModel(t, budget, seed)
		}
	}
}

func likesMatchModel(t *testing.T, budget int, seed uint64) {
	const p, users, posts = 5, 8, 60
	r := rand.New(rand.NewPCG(seed, 1))
	db, m := coldtest.Open(t, cold.Options{Upgrade: Upgrade}), newLikeModel()
	res := NewResident[testReader](budget)
	batch, place := uint64(0), uint64(0)
	for round := range 12 {
		for range 1 + r.IntN(12) {
			batch++
			one := r.IntN(4) == 0 // a batch of one, through Relate and Unrelate
			discard := !one && r.IntN(8) == 0
			saved := m.clone()
			l := NewLikes(p, res)
			if r.IntN(2) == 0 { // stored chunks read as committed, or through the transaction
				l.ReadChunksFrom(db)
			}
			puts := badgerPuts()
			update := db.Update
			if discard {
				update = func(fn func(*cold.Txn) error) error {
					txn := db.NewTxn(true)
					defer txn.Discard()
					return fn(txn)
				}
			}
			err := update(func(txn *cold.Txn) error {
				for range 1 + r.IntN(25) {
					// users 1 and 2 like much more: they turn heavy
					u := uint64(1 + r.IntN(users))
					if r.IntN(2) == 0 {
						u = uint64(1 + r.IntN(2))
					}
					post, ts := uint64(1+r.IntN(posts)), int64(r.IntN(4000))
					var changed, want bool
					var err error
					if r.IntN(5) == 0 {
						var since, wantSince int64
						wantSince, want = m.unlike(u, post)
						if one {
							changed, since, err = Unrelate(txn, p, Like, Rel{A: u, B: post})
						} else {
							place++
							changed, since, err = l.unlike(txn, u, post, place)
						}
						if err == nil && changed && since != wantSince {
							t.Fatalf("unlike of %d by %d made at %d, want %d", post, u, since, wantSince)
						}
					} else {
						want = m.like(u, post, ts)
						if one {
							changed, err = Relate(txn, p, Like, Rel{A: u, B: post}, ts)
						} else {
							place++
							changed, err = l.like(txn, u, post, ts, place)
						}
					}
					if err != nil {
						return err
					}
					if changed != want {
						t.Fatalf("seed %d: user %d post %d changed %v, want %v", seed, u, post, changed, want)
					}
					if one {
						break
					}
				}
				return l.Flush(txn, batch)
			})
			l.Close()
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case discard:
				m = saved
			case one: // Relate and Unrelate wrote past the resident records
				res = NewResident[testReader](budget)
			default:
				res.Keep(nil, l)
			}
			if r.IntN(10) == 0 { // a restart
				res = NewResident[testReader](budget)
			}
			// the cold tier's count: every key a transaction committed wrote, once
			if got := badgerPuts() - puts; !one && !discard && got != int64(l.Writes()) {
				t.Fatalf("the batch counted %d writes; the transaction wrote %d keys", l.Writes(), got)
			}
		}
		checkLikes(t, db, p, m, users, posts, r)
		for u := range uint64(users + 1) {
			var rec *likes
			err := db.View(func(txn *cold.Txn) (err error) { rec, err = NewLikes(p, nil).record(txn, u); return err })
			if err != nil || rec.heavy != m.heavy[u] {
				t.Fatalf("seed %d: user %d heavy %v, want %v (%v)", seed, u, rec.heavy, m.heavy[u], err)
			}
		}
		if round == 11 && (!m.heavy[1] || !m.heavy[2]) {
			t.Fatalf("seed %d: users 1 and 2 never turned heavy: the test misses that shape", seed)
		}
	}
}

// TestLikesPlace: a like made twice is made by the copy placed first, whichever
// arrives first, and an unlike placed after a like undoes it however late the like
// arrives; for light and heavy users alike, with the liker listed at the time of the like
// that made it.
func TestLikesPlace(t *testing.T) {
	db := coldtest.Open(t, cold.Options{Upgrade: Upgrade})
	type step struct {
		on        bool
		place     uint64
		ts        int64
		wantOn    bool
		wantPlace uint64
	}
	for _, heavyUser := range []bool{false, true} {
		u, post0 := uint64(1), uint64(0)
		if heavyUser {
			u, post0 = 2, 100
		}
		for _, c := range []struct {
			name  string
			post  uint64
			steps []step
		}{
			{"twice", 9, []step{{true, 50, 5000, true, 50}, {true, 70, 7000, true, 50}, {true, 30, 3000, true, 30}, {true, 40, 4000, true, 30}}},
			{"unlike before its like", 10, []step{{false, 60, 0, false, 0}, {true, 20, 2000, false, 0}, {true, 80, 8000, true, 80}}},
			{"an unlike among likes", 11, []step{{true, 10, 1000, true, 10}, {true, 30, 3000, true, 10}, {false, 20, 0, true, 30}, {false, 40, 0, false, 0}}},
		} {
			for i, st := range c.steps {
				var after rel.State
				err := db.Update(func(txn *cold.Txn) error {
					l := NewLikes(0, nil)
					if heavyUser && i == 0 {
						for post := range uint64(maxLightLikes + 1) {
							if _, err := l.like(txn, u, 1000+post, 1, 1); err != nil {
								return err
							}
						}
					}
					var err error
					_, after, _, err = l.Toggle(txn, u, post0+c.post, st.on, rel.Event{Place: st.place, TS: st.ts})
					if err != nil {
						return err
					}
					return l.Flush(txn, st.place)
				})
				if err != nil {
					t.Fatal(err)
				}
				if after.On != st.wantOn || (st.wantOn && after.Made.Place != st.wantPlace) {
					t.Fatalf("heavy %v, %s, step %d: on %v made at %d, want on %v at %d", heavyUser, c.name, i, after.On, after.Made.Place, st.wantOn, st.wantPlace)
				}
				liked, err := Related(db, 0, Like, u, []uint64{post0 + c.post})
				if err != nil || liked[0] != st.wantOn {
					t.Fatalf("heavy %v, %s, step %d: liked %v (%v)", heavyUser, c.name, i, liked, err)
				}
				items, _, err := List(db, 0, Like, false, post0+c.post, 10, "")
				var want []Item
				if st.wantOn {
					want = []Item{{ID: u, TS: int64(st.wantPlace) * 100}}
				}
				if err != nil || !slices.EqualFunc(items, want, sameItem) {
					t.Fatalf("heavy %v, %s, step %d: likers %v, want %v (%v)", heavyUser, c.name, i, items, want, err)
				}
			}
		}
	}
}

// TestMigrateLikes writes likes in the layout before like records (a relation key and
// two list keys per like) and checks that after Migrate every answer is the same, that
// no key of the old shape is left but a heavy user's, and that likes go on in the new.
func TestMigrateLikes(t *testing.T) {
	const p, users, posts = 2, 6, 50
	r := rand.New(rand.NewPCG(3, 3))
	db, m := coldtest.Open(t, cold.Options{Upgrade: Upgrade}), newLikeModel()
	writeOldLikes(t, db, p, m, r, users, posts, 400, 3, 10)
	// a follow in the same namespaces stays as it is
	if err := db.Update(func(txn *cold.Txn) error {
		_, err := Relate(txn, p, Follow, Rel{A: 1, B: 2}, 5)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	moved, err := Migrate(db, 4, func(id uint64) int { return int(id % 4) })
	if err != nil || moved == 0 {
		t.Fatalf("Migrate moved %d, %v", moved, err)
	}
	checkLikes(t, db, p, m, users, posts, r)
	err = db.View(func(txn *cold.Txn) error {
		for _, ns := range []byte{keys.NSRelation, keys.NSBySubject, keys.NSByObject} {
			n, err := eachLike(db, ns, 0, math.MaxUint16, func(k, _ []byte) error {
				if u := u64at(k, relOff); ns == keys.NSByObject || u > 3 {
					t.Errorf("a like key of the old shape is left: %x", k)
				}
				return nil
			})
			if err != nil {
				return err
			}
			if ns != keys.NSByObject && n == 0 {
				t.Errorf("the heavy users' keys in namespace %c are gone", ns)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if items, _, err := List(db, p, Follow, true, 1, 10, ""); err != nil || len(items) != 1 {
		t.Fatalf("follow after the migration: %v, %v", items, err)
	}
	if moved, err := Migrate(db, 4, func(id uint64) int { return int(id % 4) }); moved != 0 || err != nil {
		t.Fatalf("second Migrate moved %d, %v", moved, err)
	}
	likeAndUnlike(t, db, p, m, r, users, posts) // on both shapes
	checkLikes(t, db, p, m, users, posts, r)
}

// writeOldLikes writes up to n random likes in the layout before like records (a
// relation key and two list keys per like) and into m: users 1 to heavy are heavy, the
// others stay light with at most light likes each.
func writeOldLikes(t testing.TB, db *cold.DB, p int, m *likeModel, r *rand.Rand, users, posts, n int, heavy uint64, light int) {
	t.Helper()
	u64 := func(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }
	err := db.Update(func(txn *cold.Txn) error {
		for range n {
			u, post, ts := uint64(1+r.IntN(users)), uint64(1+r.IntN(posts)), int64(r.IntN(3000))
			if u > heavy && len(m.likes[u]) >= light {
				continue
			}
			if !m.like(u, post, ts) {
				continue
			}
			rel := Rel{A: u, B: post}
			for k, v := range map[string][]byte{
				string(relKey(p, Like, rel)):         append(u64(uint64(ts)), u64(7)...),
				string(subjectKey(p, Like, rel, ts)): nil,
				string(objectKey(p, Like, rel, ts)):  nil,
			} {
				if err := txn.Set([]byte(k), v); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestMigrateLikesResumes fails the migration's first, second, ... commit, as a crash
// would stop it there, and checks that the next Migrate finishes it with every answer
// the same: the groups already committed are not moved twice, the others not lost.
func TestMigrateLikesResumes(t *testing.T) {
	const p, users, posts = 2, 12, 80
	defer func(n int) { maxGroupOps, commitFault = n, nil }(maxGroupOps)
	maxGroupOps = 40
	partOf := func(id uint64) int { return int(id % 4) }
	faults := 0
	for fail := 1; ; fail++ {
		r := rand.New(rand.NewPCG(5, 5))
		db, m := coldtest.Open(t, cold.Options{Upgrade: Upgrade}), newLikeModel()
		writeOldLikes(t, db, p, m, r, users, posts, 800, 4, 20)
		if len(m.likes[1]) <= maxLightLikes {
			t.Fatalf("user 1 has %d likes: not heavy", len(m.likes[1]))
		}
		commits := 0
		commitFault = func() error {
			if commits++; commits == fail {
				return errors.New("injected: the process died here")
			}
			return nil
		}
		_, err := Migrate(db, 4, partOf)
		commitFault = nil
		if err == nil {
			if faults < 5 {
				t.Fatalf("the migration committed %d times; the test wants more groups", commits)
			}
			t.Logf("%d commits, each failed once and resumed", faults)
			return
		}
		faults++
		if _, err := Migrate(db, 4, partOf); err != nil {
			t.Fatalf("Migrate after a failed commit %d: %v", fail, err)
		}
		checkLikes(t, db, p, m, users, posts, r)
		if t.Failed() {
			t.Fatalf("answers differ after commit %d failed and Migrate ran again", fail)
		}
	}
}

// writeLegacyRecords writes likes of partition p in the like records of layout 2, before
// relation states (post, time and place per like; 0xff for a heavy user, user 1, whose
// likes are relation keys of 16 bytes), with their liker chunks, and into m; the layout
// mark of likes says they were moved from layout 1 already.
func writeLegacyRecords(t *testing.T, db *cold.DB, p int, m *likeModel, r *rand.Rand, users, posts uint64) {
	t.Helper()
	u64 := func(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }
	err := db.Update(func(txn *cold.Txn) error {
		if err := txn.Set(newKey(keys.NSLayout, 8).Bytes([]byte("likes")), nil); err != nil {
			return err
		}
		for u := uint64(1); u <= users; u++ {
			var rec []byte
			n := 1 + r.IntN(maxLightLikes)
			if u == 1 {
				n = maxLightLikes + 5
			}
			for range n {
				post, ts := uint64(1+r.IntN(int(posts))), int64(r.IntN(3000))
				if !m.like(u, post, ts) {
					continue
				}
				rl := Rel{A: u, B: post}
				if u == 1 { // heavy: its likes are keys, as written then
					if err := txn.Set(relKey(p, Like, rl), append(u64(uint64(ts)), u64(7)...)); err != nil {
						return err
					}
					if err := txn.Set(subjectKey(p, Like, rl, ts), nil); err != nil {
						return err
					}
				} else {
					rec = append(append(append(rec, u64(post)...), u64(uint64(ts))...), u64(uint64(ts)+1)...)
				}
			}
			if u == 1 {
				rec = []byte{0xff}
			}
			if err := txn.Set(newKey(keys.NSLikes, relOff+8).U16(p).U8(legacyRecordKind).U64(u), rec); err != nil {
				return err
			}
		}
		// The likers of each post and second, one chunk each.
		for post := uint64(1); post <= posts; post++ {
			byKey := map[string][]liker{}
			for u, ls := range m.likes {
				if ts, ok := ls[post]; ok {
					k := string(likersKey(p, post, secondOf(ts), 1))
					byKey[k] = append(byKey[k], liker{user: u, ts: ts})
				}
			}
			for k, ls := range byKey {
				if err := txn.Set([]byte(k), encodeLikers(ls)); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestMigrateLikeStates writes like records of the layout before relation states and
// checks that after Migrate every answer is the same, no record of the old kind is left,
// and likes and unlikes go on.
func TestMigrateLikeStates(t *testing.T) {
	const p, users, posts = 3, 8, 60
	r := rand.New(rand.NewPCG(9, 9))
	db, m := coldtest.Open(t, cold.Options{Upgrade: Upgrade}), newLikeModel()
	writeLegacyRecords(t, db, p, m, r, users, posts)
	moved, err := Migrate(db, 4, func(id uint64) int { return int(id % 4) })
	if err != nil || moved != users {
		t.Fatalf("Migrate moved %d records, want %d (%v)", moved, users, err)
	}
	checkLikes(t, db, p, m, users, posts, r)
	if moved, err := Migrate(db, 4, func(id uint64) int { return int(id % 4) }); moved != 0 || err != nil {
		t.Fatalf("second Migrate moved %d, %v", moved, err)
	}
	noLegacyRecords(t, db, p)
	likeAndUnlike(t, db, p, m, r, users, posts)
	checkLikes(t, db, p, m, users, posts, r)
}

// noLegacyRecords fails if partition p holds a like record of layout 2.
func noLegacyRecords(t *testing.T, db *cold.DB, p int) {
	t.Helper()
	err := db.View(func(txn *cold.Txn) error {
		prefix := newKey(keys.NSLikes, 4).U16(p).U8(legacyRecordKind)
		it := txn.Iterator(cold.IteratorOptions{Prefix: prefix})
		defer it.Close()
		for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
			t.Errorf("a like record of the old kind is left: %x", it.Key())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// likeAndUnlike likes and unlikes at random in partition p, placed after every event
// the tests place before (checkRelikes: 2^40 on).
func likeAndUnlike(t *testing.T, db *cold.DB, p int, m *likeModel, r *rand.Rand, users, posts uint64) {
	t.Helper()
	err := db.Update(func(txn *cold.Txn) error {
		l := NewLikes(p, nil)
		for i := range 200 {
			u, post := uint64(1+r.IntN(int(users))), uint64(1+r.IntN(int(posts)))
			if r.IntN(3) == 0 {
				m.unlike(u, post)
				if _, _, err := l.unlike(txn, u, post, uint64(1<<42+i)); err != nil {
					return err
				}
			} else if m.like(u, post, 2500) {
				if _, err := l.like(txn, u, post, 2500, uint64(1<<42+i)); err != nil {
					return err
				}
			}
		}
		return l.Flush(txn, 1<<43)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestUnlikesOfOneChunkInOneBatch: two unlikes in one batch take their likers out of
// the same stored chunk, read as committed (ReadChunksFrom): the second sees what the
// first rewrote, so neither liker comes back.
func TestUnlikesOfOneChunkInOneBatch(t *testing.T) {
	const p, post = 1, 500
	db := coldtest.Open(t, cold.Options{Upgrade: Upgrade})
	batch := func(n uint64, fn func(txn *cold.Txn, l *Likes) error) {
		t.Helper()
		l := NewLikes(p, nil)
		l.ReadChunksFrom(db)
		defer l.Close()
		err := db.Update(func(txn *cold.Txn) error {
			if err := fn(txn, l); err != nil {
				return err
			}
			return l.Flush(txn, n)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	batch(1, func(txn *cold.Txn, l *Likes) error { // three likers in one second: one chunk
		for u := range uint64(3) {
			if _, err := l.like(txn, 10+u, post, 5_000+int64(u), 1+u); err != nil {
				return err
			}
		}
		return nil
	})
	batch(2, func(txn *cold.Txn, l *Likes) error {
		for _, u := range []uint64{10, 12} {
			if changed, _, err := l.unlike(txn, u, post, 10+u); err != nil || !changed {
				return fmt.Errorf("unlike by %d: changed %v, %w", u, changed, err)
			}
		}
		return nil
	})
	err := db.View(func(txn *cold.Txn) error {
		n, err := countLikers(txn, p, post)
		if err == nil && n != 1 {
			t.Fatalf("%d likers after two of three unliked, want 1", n)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A batch of late likes that move many likers out of one stored chunk of a popular
// post writes that chunk once: each move rewrote it before, and every write of it
// counted whole against the transaction's bound, so one hop batch of such likes could
// outgrow a transaction alone and be dead-lettered (BenchmarkJSON/unsplit lost a hop
// batch's likes so). The likers listed are exact after it.
func TestLateLikesRewriteAChunkOnce(t *testing.T) {
	const p, post, users, late = 2, 77, 1200, 500
	db := coldtest.Open(t, cold.Options{Upgrade: Upgrade, MemTableSize: 1 << 20})
	const second = int64(1_700_000_000_000)
	like := func(batch uint64, from, to int, place func(u int) uint64, ts func(u int) int64) error {
		return db.Update(func(txn *cold.Txn) error {
			l := NewLikes(p, nil)
			l.ReadChunksFrom(db)
			defer l.Close()
			for u := from; u < to; u++ {
				if _, _, _, err := l.Toggle(txn, uint64(u), post, true, rel.Event{Place: place(u), TS: ts(u)}); err != nil {
					return err
				}
			}
			return l.Flush(txn, batch)
		})
	}
	// 1 200 likes in one second: one stored chunk of 19 KB.
	if err := like(1, 1, users+1, func(u int) uint64 { return uint64(10_000 + u) }, func(u int) int64 { return second + 900 }); err != nil {
		t.Fatal(err)
	}
	// The same likes of 500 users, placed before those and made a little earlier in the
	// same second, come late: each moves its liker out of the stored chunk.
	puts := badgerPuts()
	err := like(2, 1, late+1, func(u int) uint64 { return uint64(u) }, func(u int) int64 { return second + 100 })
	if err != nil {
		t.Fatalf("a batch of %d late likes: %v", late, err)
	}
	// A record each, the batch's own chunk and the stored one.
	if got := badgerPuts() - puts; got > late+2 {
		t.Errorf("%d Badger writes for %d late likes: the stored chunk written more than once", got, late)
	}
	items, _, err := List(db, p, Like, false, post, users+1, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != users {
		t.Fatalf("%d likers listed, want %d", len(items), users)
	}
	for _, it := range items {
		want := second + 900
		if it.ID <= late {
			want = second + 100
		}
		if it.TS != want {
			t.Fatalf("user %d listed at %d, want %d", it.ID, it.TS, want)
		}
	}
}

// A heavy user's like costs a bounded number of allocations in a batch: its relation
// key, list key and state are made in the batch's arena, and its state looked for with
// the batch's key buffer (Badger's writes allocate nothing of their own either:
// store/cold/badger): 1.26 allocations a like, where it was 7.25.
func TestHeavyLikeAllocations(t *testing.T) {
	const p, u = 1, 7
	db := coldtest.Open(t, cold.Options{Upgrade: Upgrade})
	place := uint64(0)
	batch := func(from, n uint64) {
		t.Helper()
		l := NewLikes(p, nil)
		err := db.Update(func(txn *cold.Txn) error {
			for post := from; post < from+n; post++ {
				place++
				if _, err := l.like(txn, u, post, int64(post)*1000, place); err != nil {
					return err
				}
			}
			return l.Flush(txn, place)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	batch(1, maxLightLikes+1) // u turns heavy
	const likes = 500
	post := uint64(1_000)
	allocs := testing.AllocsPerRun(10, func() { batch(post, likes); post += likes }) / likes
	t.Logf("%.2f allocations a heavy user's like", allocs)
	if allocs > 2 {
		t.Errorf("%.2f allocations a heavy user's like, want at most 2", allocs)
	}
	// Every like is there.
	err := db.View(func(txn *cold.Txn) error {
		liked := make([]bool, 1)
		for _, b := range []uint64{1, maxLightLikes + 1, 1_000, post - 1} {
			if err := relatedLikes(txn, p, u, []uint64{b}, liked); err != nil || !liked[0] {
				return fmt.Errorf("post %d liked %v, %w", b, liked[0], err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A like by a user never seen allocates its record and the room for its like once, and
// a chunk's first likers take room from the batch's blocks: about one allocation a like
// (Badger's lookup and writes allocate next to nothing: store/cold's allocation tests).
func TestNewLikerAllocations(t *testing.T) {
	const p, likes, posts = 1, 2000, 300
	db := coldtest.Open(t, cold.Options{Upgrade: Upgrade})
	l := NewLikes(p, nil)
	u, place := uint64(0), uint64(0)
	batch := func() {
		l.Reset(nil)
		err := db.Update(func(txn *cold.Txn) error {
			for i := range likes {
				u, place = u+1, place+1
				if _, err := l.like(txn, u, uint64(1+i%posts), int64(place)*1000, place); err != nil {
					return err
				}
			}
			return l.Flush(txn, place)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	batch() // the maps' room
	allocs := testing.AllocsPerRun(5, batch) / likes
	t.Logf("%.2f allocations a like by a user never seen", allocs)
	if allocs > 1.5 {
		t.Errorf("%.2f allocations a like by a user never seen, want at most 1.5", allocs)
	}
	// Every like is there, and each post lists its likers.
	err := db.View(func(txn *cold.Txn) error {
		liked := make([]bool, 1)
		for _, c := range []struct{ u, post uint64 }{{1, 1}, {2, 2}, {u, uint64(1 + (likes-1)%posts)}} {
			if err := relatedLikes(txn, p, c.u, []uint64{c.post}, liked); err != nil || !liked[0] {
				return fmt.Errorf("user %d post %d: liked %v, %w", c.u, c.post, liked[0], err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = db.View(func(txn *cold.Txn) error {
		n, err := countLikers(txn, p, 1)
		if want := u / likes * ((likes + posts - 1) / posts); err == nil && n != want {
			return fmt.Errorf("post 1 has %d likers, want %d", n, want)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestPlaceKeepsRecordOrder: moving the one like a toggle changed or added leaves a
// record as sorting it whole would, wherever the like goes, over random records.
func TestPlaceKeepsRecordOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	random := func() rel.State {
		if r.IntN(3) == 0 {
			return rel.State{Off: r.Uint64N(100)}
		}
		return rel.State{On: true, Made: rel.Event{TS: r.Int64N(8), Place: r.Uint64N(100)}}
	}
	for range 5000 {
		l := &likes{}
		for post := range r.Uint64N(maxLightLikes) {
			l.list = append(l.list, like{post: post * 7 % 41, State: random()})
		}
		slices.SortStableFunc(l.list, recordOrder)
		i := len(l.list)
		if i == 0 || r.IntN(3) == 0 {
			l.list = append(l.list, like{post: 1000 + r.Uint64N(5)})
		} else {
			i = r.IntN(i)
		}
		l.list[i].State = random()
		want := slices.Clone(l.list)
		slices.SortStableFunc(want, recordOrder)
		l.place(i)
		if !slices.EqualFunc(l.list, want, func(a, b like) bool { return a.post == b.post && a.Equal(b.State) }) {
			t.Fatalf("placed %v, sorted %v", l.list, want)
		}
	}
}
