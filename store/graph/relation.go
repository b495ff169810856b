package graph

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"math"

	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/internal/arena"
	"github.com/tally-dev/tally/store/internal/keys"
	"github.com/tally-dev/tally/store/rel"
)

// Kind is a kind of relation.
type Kind byte

// Relation kinds. A comment relation is (user, post, comment id); likes and follows have
// no third part.
const (
	Like    Kind = 'l'
	Comment Kind = 'c'
	Follow  Kind = 'f'
)

// indexed reports whether a kind keeps newest-first lists per subject and per object.
func (k Kind) indexed() bool { return k == Like || k == Follow }

// Every key of a relation is in one partition's state, which only that partition's stage
// writes: the relation and its subject's list (what a user liked or follows) in the
// subject's partition p, where the event is applied. The object's list is there too for
// likes (who liked a post: gathered from every partition when asked); a follow's object
// list (who follows a user) is in the followed user's partition, which the follower's
// partition tells (AddFollower), so that a post's fan-out reads only its own partition.
// Likes have a shape of their own, cheaper to write (likes.go); the functions here take
// every kind.

// Rel is subject A related to object B (third part C for comments).
type Rel struct{ A, B, C uint64 }

// Key layout: namespace, partition, kind, then the fields. relOff is where the fields
// start: the offsets below are from the start of the key.
const relOff = 4

func relPrefix(ns byte, p int, k Kind) key { return relPrefixTo(make(key, 0, relOff+32), ns, p, k) }

// relPrefixTo appends relPrefix to b.
func relPrefixTo(b key, ns byte, p int, k Kind) key { return append(b, ns).U16(p).U8(byte(k)) }

func relKey(p int, k Kind, r Rel) key { return relKeyTo(make(key, 0, relLen), p, k, r) }

// relKeyTo appends relKey to b.
func relKeyTo(b key, p int, k Kind, r Rel) key {
	return relPrefixTo(b, keys.NSRelation, p, k).U64(r.A).U64(r.B).U64(r.C)
}

// Index keys order by descending time: ^ts sorts the newest first.
func subjectKey(p int, k Kind, r Rel, ts int64) key {
	return subjectKeyTo(make(key, 0, indexLen), p, k, r, ts)
}

// subjectKeyTo appends subjectKey to b.
func subjectKeyTo(b key, p int, k Kind, r Rel, ts int64) key {
	return relPrefixTo(b, keys.NSBySubject, p, k).U64(r.A).U64(math.MaxUint64 - uint64(ts)).U64(r.B).U64(r.C)
}

func objectKey(p int, k Kind, r Rel, ts int64) key {
	return relPrefix(keys.NSByObject, p, k).U64(r.B).U64(math.MaxUint64 - uint64(ts)).U64(r.A).U64(r.C)
}

// indexLen is the length of an index key; idxID, idxTS and idxOther the offsets of its
// id, inverted time and other side.
const (
	indexLen = relOff + 32
	idxID    = relOff
	idxTS    = relOff + 8
	idxOther = relOff + 16
	relLen   = relOff + 24
)

// Toggle applies an event of relation r of kind k (comments and follows; likes are
// made through Likes) placed at e.Place: on makes it, !on undoes it. It returns the
// relation's state before and after (see rel.State.Apply), so that a relation's events
// end as in the stream's order whatever the order they arrive in: an undoing placed after
// a making that comes late keeps it undone (the state is kept as a tombstone), and a
// relation made twice is made by its copy placed first. Its subject's list key follows
// the time of the event that made it.
func Toggle(txn *cold.Txn, p int, k Kind, r Rel, on bool, e rel.Event) (before, after rel.State, forgot bool, err error) {
	if k == Like {
		l := NewLikes(p, nil)
		l.merged = true
		if before, after, forgot, err = l.Toggle(txn, r.A, r.B, on, e); err != nil {
			return before, after, forgot, err
		}
		return before, after, forgot, l.Flush(txn, e.Place)
	}
	e.TS = max(e.TS, 0)
	return toggleKey(txn, p, k, r, on, e)
}

// toggleKey applies an event to the state relation r keeps in its relation key and
// writes it back, with its subject's list key (putState).
func toggleKey(txn *cold.Txn, p int, k Kind, r Rel, on bool, e rel.Event) (before, after rel.State, forgot bool, err error) {
	if before, err = getState(txn, relKey(p, k, r)); err != nil {
		return before, after, false, err
	}
	after = before.Clone()
	_, forgot = after.Apply(on, e)
	if after.Equal(before) {
		return before, after, forgot, nil
	}
	_, err = putState(txn, nil, p, k, r, before, after)
	return before, after, forgot, err
}

// getState reads the relation state at rk (the zero state when there is none).
func getState(txn *cold.Txn, rk key) (rel.State, error) {
	var st rel.State
	_, err := txn.Get(rk, func(v []byte) (err error) {
		if st, err = rel.Unmarshal(v); err != nil {
			return fmt.Errorf("%w: relation %x: %w", cold.ErrCorrupt, rk, err)
		}
		return nil
	})
	return st, err
}

// wrote are the keys putState set or deleted: a relation key and up to two list keys.
type wrote struct {
	keys [3]key
	n    int
}

func (w *wrote) add(k key) { w.keys[w.n], w.n = k, w.n+1 }

// putState writes relation r's state after, and moves its subject's list key (kinds
// with lists) from before's time to after's, its keys and value made in a's room
// (Badger holds them until the commit; nil: each allocated). It returns the keys it
// wrote.
func putState(txn *cold.Txn, a *arena.Arena, p int, k Kind, r Rel, before, after rel.State) (w wrote, err error) {
	rk := relKeyTo(a.Alloc(relLen), p, k, r)
	w.add(rk)
	if err := txn.Set(rk, after.MarshalAppend(a.Alloc(after.MarshalSize()))); err != nil {
		return w, err
	}
	if !k.indexed() || (before.On == after.On && before.Made.TS == after.Made.TS) {
		return w, nil
	}
	if before.On {
		sk := subjectKeyTo(a.Alloc(indexLen), p, k, r, before.Made.TS)
		if err := txn.Delete(sk); err != nil {
			return w, err
		}
		w.add(sk)
	}
	if after.On {
		sk := subjectKeyTo(a.Alloc(indexLen), p, k, r, after.Made.TS)
		if err := txn.Set(sk, nil); err != nil {
			return w, err
		}
		w.add(sk)
	}
	return w, nil
}

// Relate makes r at time ts in partition p, placed after every event it has seen; it
// reports whether anything changed. Unrelate undoes it the same way and reports the
// time the relation was made. They are for tests and tools, which have no places.
func Relate(txn *cold.Txn, p int, k Kind, r Rel, ts int64) (bool, error) {
	before, after, err := toggleLast(txn, p, k, r, true, ts)
	return after.On && !before.On, err
}

// Unrelate is Relate's undoing (see Relate).
func Unrelate(txn *cold.Txn, p int, k Kind, r Rel) (changed bool, since int64, err error) {
	before, after, err := toggleLast(txn, p, k, r, false, 0)
	return before.On && !after.On, before.Made.TS, err
}

// toggleLast toggles r at a place after every event its state keeps.
func toggleLast(txn *cold.Txn, p int, k Kind, r Rel, on bool, ts int64) (before, after rel.State, err error) {
	var st rel.State
	if k == Like {
		var heavy bool
		l := NewLikes(p, nil)
		rec, err := l.record(txn, r.A)
		if err != nil {
			return st, st, err
		}
		if heavy = rec.heavy; !heavy {
			if i := rec.find(r.B); i >= 0 {
				st = rec.list[i].State
			}
		}
		if heavy {
			st, err = getState(txn, relKey(p, k, r))
		}
		if err != nil {
			return st, st, err
		}
	} else if st, err = getState(txn, relKey(p, k, r)); err != nil {
		return st, st, err
	}
	last := max(st.Made.Place, st.Off)
	for _, e := range st.Later {
		last = max(last, e.Place)
	}
	before, after, _, err = Toggle(txn, p, k, r, on, rel.Event{Place: last + 1, TS: ts})
	return before, after, err
}

// AddFollower adds r's follower to the object list of the followed user (r.B) in their
// partition p, with the time the follow was made; DeleteFollower removes it.
func AddFollower(txn *cold.Txn, p int, r Rel, ts int64) error {
	return txn.Set(objectKey(p, Follow, r, max(ts, 0)), nil)
}

// DeleteFollower removes r's follower from the followed user's list (see AddFollower).
func DeleteFollower(txn *cold.Txn, p int, r Rel, ts int64) error {
	return txn.Delete(objectKey(p, Follow, r, max(ts, 0)))
}

// Objects calls fn for the objects of subject a, of partition p (whom a follows, what a
// liked) with the time each relation was made, newest first, until fn returns false.
func Objects(txn *cold.Txn, p int, k Kind, a uint64, fn func(b uint64, ts int64) bool) {
	scan(txn, keys.NSBySubject, p, k, a, fn)
}

// Subjects calls fn for the subjects of object b kept in partition p (who follows b, in
// b's partition; who liked b, in the likers' partition), newest first, until fn returns
// false. It reads keys only.
func Subjects(txn *cold.Txn, p int, k Kind, b uint64, fn func(a uint64, ts int64) bool) {
	scan(txn, keys.NSByObject, p, k, b, fn)
}

func scan(txn *cold.Txn, ns byte, p int, k Kind, id uint64, fn func(other uint64, ts int64) bool) {
	prefix := relPrefix(ns, p, k).U64(id)
	it := txn.Iterator(cold.IteratorOptions{Prefix: prefix})
	defer it.Close()
	for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
		kb := it.Key()
		if len(kb) == indexLen && !fn(u64at(kb, idxOther), int64(math.MaxUint64-u64at(kb, idxTS))) {
			return
		}
	}
}

// Related reports for each b whether (a, b) exists (likes and follows), a being of
// partition p.
func Related(db *cold.DB, p int, k Kind, a uint64, bs []uint64) ([]bool, error) {
	out := make([]bool, len(bs))
	err := db.View(func(txn *cold.Txn) error {
		if k == Like {
			return relatedLikes(txn, p, a, bs, out)
		}
		return relatedKeys(txn, p, k, a, bs, out)
	})
	return out, err
}

// relatedKeys sets out[i] when the relation key (a, bs[i]) exists.
func relatedKeys(txn *cold.Txn, p int, k Kind, a uint64, bs []uint64, out []bool) error {
	for i, b := range bs {
		st, err := getState(txn, relKey(p, k, Rel{A: a, B: b}))
		if err != nil {
			return err
		}
		out[i] = st.On
	}
	return nil
}

// Item is one entry of a relation list: the other side's id and the time of the relation.
type Item struct {
	ID     uint64
	TS     int64
	cursor []byte // its place in the list: a page ending here continues after it
}

// Cursor is the cursor of a page ending with it. Cursors sort as their items do: a
// cursor that is less comes first (newer).
func (it Item) Cursor() string { return hex.EncodeToString(it.cursor) }

// List returns up to limit relations of id kept in partition p, newest first: the
// objects of subject id (bySubject) or the subjects of object id. before is the cursor
// returned by the previous page ("" for the first); next is "" on the last page. A
// cursor is the same in every partition (time, then the other side), so the pages of
// several partitions merge by comparing cursors (see Cursor).
func List(db *cold.DB, p int, k Kind, bySubject bool, id uint64, limit int, before string) (items []Item, next string, err error) {
	if !k.indexed() {
		return nil, "", fmt.Errorf("relation kind %c has no lists", k)
	}
	ns := byte(keys.NSByObject)
	if bySubject {
		ns = keys.NSBySubject
	}
	prefix := relPrefix(ns, p, k).U64(id)
	start := prefix
	var from []byte
	if before != "" {
		c, err := hex.DecodeString(before)
		if err != nil || len(c) != 24 {
			return nil, "", fmt.Errorf("before %q is not a cursor this server returned", before)
		}
		// Seek just past the cursor: append a byte so the cursor key itself is skipped.
		start, from = append(append(append(key{}, prefix...), c...), 0), c
	}
	err = db.View(func(txn *cold.Txn) error {
		if k == Like && !bySubject {
			items, next, err = likersPage(txn, p, id, limit, from)
			return err
		}
		if k == Like {
			var ok bool
			if items, next, ok, err = likedPage(txn, p, id, limit, from); ok || err != nil {
				return err
			}
		}
		it := txn.Iterator(cold.IteratorOptions{Prefix: prefix})
		defer it.Close()
		var last []byte
		for it.Seek(start); it.ValidForPrefix(prefix); it.Next() {
			kb := it.Key()
			if len(kb) != indexLen {
				return fmt.Errorf("%w: index key of %d bytes", cold.ErrCorrupt, len(kb))
			}
			if len(items) == limit {
				next = hex.EncodeToString(last)
				return nil
			}
			items = append(items, Item{ID: u64at(kb, idxOther), TS: int64(math.MaxUint64 - u64at(kb, idxTS)), cursor: append([]byte(nil), kb[idxTS:indexLen]...)})
			last = append(last[:0], kb[idxTS:indexLen]...)
		}
		return nil
	})
	return items, next, err
}

// Recount is what the relations make the counts of some posts and users: likes and
// comments of each post, followers and following of each user, in the order asked.
type Recount struct {
	Likes, Comments      []uint64
	Followers, Following []uint64
}

// CountRelations recounts from the relations kept in partitions parts, in one read
// transaction so that every number is of the same instant; the counts of several
// processes add up. Likes, followers and following are counted on their indexes (a
// key-only scan of each id's prefix); comments have no per-post index, so counting them
// scans every comment relation once — proportional to all comments, which is why audits
// are on demand or slow samples.
func CountRelations(db *cold.DB, parts []int, posts, users []uint64) (Recount, error) {
	rc := Recount{Likes: make([]uint64, len(posts)), Comments: make([]uint64, len(posts)),
		Followers: make([]uint64, len(users)), Following: make([]uint64, len(users))}
	err := db.View(func(txn *cold.Txn) error {
		at := make(map[uint64][]int, len(posts)) // a post asked twice is counted for both
		for i, post := range posts {
			at[post] = append(at[post], i)
		}
		for _, p := range parts {
			for i, post := range posts {
				n, err := countLikers(txn, p, post)
				if err != nil {
					return err
				}
				rc.Likes[i] += n
			}
			for i, u := range users {
				rc.Followers[i] += countPrefix(txn, relPrefix(keys.NSByObject, p, Follow).U64(u))
				rc.Following[i] += countPrefix(txn, relPrefix(keys.NSBySubject, p, Follow).U64(u))
			}
			if len(posts) == 0 {
				continue
			}
			if err := countComments(txn, p, at, rc.Comments); err != nil {
				return err
			}
		}
		return nil
	})
	return rc, err
}

// countComments adds partition p's comments of the posts at lists the places of.
func countComments(txn *cold.Txn, p int, at map[uint64][]int, comments []uint64) error {
	prefix := relPrefix(keys.NSRelation, p, Comment)
	it := txn.Iterator(cold.IteratorOptions{Prefix: prefix, PrefetchValues: true})
	defer it.Close()
	for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
		kb := it.Key()
		if len(kb) != relLen {
			return fmt.Errorf("%w: comment relation key of %d bytes", cold.ErrCorrupt, len(kb))
		}
		is := at[u64at(kb, relOff+8)]
		if len(is) == 0 {
			continue
		}
		var st rel.State
		err := it.Value(func(v []byte) (err error) { st, err = rel.Unmarshal(v); return err })
		if err != nil {
			return fmt.Errorf("%w: comment relation %x: %w", cold.ErrCorrupt, kb, err)
		}
		for _, i := range is {
			if st.On {
				comments[i]++
			}
		}
	}
	return nil
}

// countPrefix counts the keys under prefix without reading values.
func countPrefix(txn *cold.Txn, prefix []byte) uint64 {
	it := txn.Iterator(cold.IteratorOptions{Prefix: prefix})
	defer it.Close()
	var n uint64
	for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
		n++
	}
	return n
}

// SampleRelated returns up to n distinct ids picked at random among those with at least
// one relation of kind k: objects (liked posts, followed users), or subjects (users who
// like or follow) when bySubject; all of them when there are at most n. Each pick seeks
// to a random id between the first and the last and takes the next one present not
// picked yet, so an id after a wide gap is picked more often: a sample to audit, not a
// uniform one. rand returns random 64-bit numbers.
//
// The ids are of partition p's lists: a follow's object list is in the followed user's
// partition, the others in the subject's (see RelateAt). A heavy liker whose likes were
// all undone is still picked (see Likes).
func SampleRelated(db *cold.DB, p int, k Kind, bySubject bool, n int, rand func() uint64) ([]uint64, error) {
	if !k.indexed() {
		return nil, fmt.Errorf("relation kind %c has no index to sample", k)
	}
	ns, keyLen, kind := byte(keys.NSByObject), indexLen, k
	switch {
	case k == Like && bySubject:
		ns, keyLen, kind = keys.NSLikes, relOff+8, recordKind
	case k == Like:
		ns, keyLen = keys.NSLikers, chunkLen
	case bySubject:
		ns = keys.NSBySubject
	}
	prefix := relPrefix(ns, p, kind)
	seen := map[uint64]bool{}
	var out []uint64
	err := db.View(func(txn *cold.Txn) error {
		// Pick within the ids present, [lo, hi], or small ids would hardly ever be hit.
		rev := txn.Iterator(cold.IteratorOptions{Prefix: prefix, Reverse: true})
		last := append(append(key{}, prefix...), bytes.Repeat([]byte{0xff}, 32)...) // ≥ every index key
		rev.Seek(last)
		if !rev.ValidForPrefix(prefix) {
			rev.Close()
			return nil // no relation of this kind at all
		}
		hi := u64at(rev.Key(), idxID)
		rev.Close()
		it := txn.Iterator(cold.IteratorOptions{Prefix: prefix})
		defer it.Close()
		it.Seek(prefix)
		lo := u64at(it.Key(), idxID)
		// next is the first id at or after from, wrapping around past the last.
		next := func(from uint64) (uint64, error) {
			it.Seek(append(key{}, prefix...).U64(from))
			if !it.ValidForPrefix(prefix) {
				it.Seek(prefix)
			}
			kb := it.Key()
			if len(kb) != keyLen {
				return 0, fmt.Errorf("%w: list key of %d bytes", cold.ErrCorrupt, len(kb))
			}
			return u64at(kb, idxID), nil
		}
		for len(out) < n {
			pick := lo
			if span := hi - lo + 1; span != 0 { // 0: every id from 0 to 2^64-1
				pick += rand() % span
			} else {
				pick = rand()
			}
			id, err := next(pick)
			if err != nil {
				return err
			}
			// An id picked already: walk on to the next one not picked, so that n
			// distinct ids are found whenever there are n.
			for first := id; seen[id]; {
				if id == hi {
					id = lo
				} else if id, err = next(id + 1); err != nil {
					return err
				}
				if id == first {
					return nil // every id is in the sample
				}
			}
			seen[id] = true
			out = append(out, id)
		}
		return nil
	})
	return out, err
}

// Follows calls fn, in one read transaction, with every follow made and not undone by
// a user of partition p: the user and whom they follow. fn may write in transactions of
// its own; an error of it stops the scan.
func Follows(db *cold.DB, p int, fn func(uid, author uint64) error) error {
	prefix := relPrefix(keys.NSRelation, p, Follow)
	return db.View(func(txn *cold.Txn) error {
		return txn.Scan(prefix, nil, true, func(k, v []byte) (bool, error) {
			if len(k) != relLen {
				return true, nil
			}
			st, err := rel.Unmarshal(v)
			if err != nil {
				return false, fmt.Errorf("%w: follow %x: %w", cold.ErrCorrupt, k, err)
			}
			if !st.On {
				return true, nil // undone: a tombstone
			}
			return true, fn(u64at(k, relOff), u64at(k, relOff+8))
		})
	})
}
