package cold

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"

	"github.com/dgraph-io/badger/v4"
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

func relPrefix(ns byte, p int, k Kind) key { return newKey(ns, relOff+32).u16(p).u8(byte(k)) }

func relKey(p int, k Kind, r Rel) key {
	return relPrefix(nsRelation, p, k).u64(r.A).u64(r.B).u64(r.C)
}

// Index keys order by descending time: ^ts sorts the newest first.
func subjectKey(p int, k Kind, r Rel, ts int64) key {
	return relPrefix(nsBySubject, p, k).u64(r.A).u64(math.MaxUint64 - uint64(ts)).u64(r.B).u64(r.C)
}

func objectKey(p int, k Kind, r Rel, ts int64) key {
	return relPrefix(nsByObject, p, k).u64(r.B).u64(math.MaxUint64 - uint64(ts)).u64(r.A).u64(r.C)
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

// Relate makes r in partition p if it does not exist; it reports whether anything
// changed.
func Relate(txn *badger.Txn, p int, k Kind, r Rel, ts int64) (bool, error) {
	changed, _, err := RelateAt(txn, p, k, r, ts, 0)
	return changed, err
}

// AddFollower adds r's follower to the object list of the followed user (r.B) in their
// partition p, with the time the follow was made; DeleteFollower removes it.
func AddFollower(txn *badger.Txn, p int, r Rel, ts int64) error {
	return txn.Set(objectKey(p, Follow, r, max(ts, 0)), nil)
}

// DeleteFollower removes r's follower from the followed user's list (see AddFollower).
func DeleteFollower(txn *badger.Txn, p int, r Rel, ts int64) error {
	return txn.Delete(objectKey(p, Follow, r, max(ts, 0)))
}

// RelateAt is Relate for an event placed at seq in the events stream (see
// pipeline.Event.Seq), which the relation keeps. When r exists already it reports the
// place it keeps (0 for a relation made without one); an event placed before that
// place takes it over, so that a relation stored twice is placed by its first copy in
// the stream whichever copy was applied first.
//
// A like made here is a batch of its own (see Likes): the event stage batches them.
func RelateAt(txn *badger.Txn, p int, k Kind, r Rel, ts int64, seq uint64) (changed bool, at uint64, err error) {
	if k != Like {
		return relateAt(txn, p, k, r, ts, seq)
	}
	l := NewLikes(p, nil)
	l.merged = true
	if changed, at, err = l.Like(txn, r.A, r.B, ts, seq); err != nil {
		return false, 0, err
	}
	return changed, at, l.Flush(txn, seq)
}

// relateAt is RelateAt in relation keys: a relation key, and the subject's list key of
// kinds with lists.
func relateAt(txn *badger.Txn, p int, k Kind, r Rel, ts int64, seq uint64) (changed bool, at uint64, err error) {
	if ts < 0 {
		ts = 0
	}
	rk := relKey(p, k, r)
	item, err := txn.Get(rk)
	switch {
	case err == nil:
		v, err := item.ValueCopy(nil)
		if err != nil {
			return false, 0, err
		}
		if len(v) != 16 {
			return false, 0, nil
		}
		at = binary.BigEndian.Uint64(v[8:])
		if seq != 0 && seq < at {
			binary.BigEndian.PutUint64(v[8:], seq)
			err = txn.Set(rk, v)
		}
		return false, at, err
	case !errors.Is(err, badger.ErrKeyNotFound):
		return false, 0, err
	}
	v := binary.BigEndian.AppendUint64(nil, uint64(ts))
	if seq != 0 {
		v = binary.BigEndian.AppendUint64(v, seq)
	}
	if err := txn.Set(rk, v); err != nil {
		return false, 0, err
	}
	if k.indexed() {
		if err := txn.Set(subjectKey(p, k, r, ts), nil); err != nil {
			return false, 0, err
		}
	}
	return true, seq, nil
}

// Unrelate removes r from partition p if it exists; it reports whether anything changed
// and, if so, the time the relation was made.
func Unrelate(txn *badger.Txn, p int, k Kind, r Rel) (changed bool, since int64, err error) {
	if k == Like {
		l := NewLikes(p, nil)
		if changed, since, err = l.Unlike(txn, r.A, r.B); err != nil {
			return false, 0, err
		}
		return changed, since, l.Flush(txn, 0)
	}
	return unrelate(txn, p, k, r)
}

// unrelate is Unrelate in relation keys (see relateAt).
func unrelate(txn *badger.Txn, p int, k Kind, r Rel) (changed bool, since int64, err error) {
	rk := relKey(p, k, r)
	item, err := txn.Get(rk)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return false, 0, nil
	} else if err != nil {
		return false, 0, err
	}
	v, err := item.ValueCopy(nil)
	if err != nil {
		return false, 0, err
	}
	if len(v) != 8 && len(v) != 16 { // time, and place when made with one
		return false, 0, fmt.Errorf("%w: relation value of %d bytes", ErrCorrupt, len(v))
	}
	ts := int64(binary.BigEndian.Uint64(v))
	if err := txn.Delete(rk); err != nil {
		return false, 0, err
	}
	if k.indexed() {
		if err := txn.Delete(subjectKey(p, k, r, ts)); err != nil {
			return false, 0, err
		}
	}
	return true, ts, nil
}

// Objects calls fn for the objects of subject a, of partition p (whom a follows, what a
// liked) with the time each relation was made, newest first, until fn returns false.
func Objects(txn *badger.Txn, p int, k Kind, a uint64, fn func(b uint64, ts int64) bool) {
	scan(txn, nsBySubject, p, k, a, fn)
}

// Subjects calls fn for the subjects of object b kept in partition p (who follows b, in
// b's partition; who liked b, in the likers' partition), newest first, until fn returns
// false. It reads keys only.
func Subjects(txn *badger.Txn, p int, k Kind, b uint64, fn func(a uint64, ts int64) bool) {
	scan(txn, nsByObject, p, k, b, fn)
}

func scan(txn *badger.Txn, ns byte, p int, k Kind, id uint64, fn func(other uint64, ts int64) bool) {
	prefix := relPrefix(ns, p, k).u64(id)
	it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
	defer it.Close()
	for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
		kb := it.Item().Key()
		if len(kb) == indexLen && !fn(u64at(kb, idxOther), int64(math.MaxUint64-u64at(kb, idxTS))) {
			return
		}
	}
}

// Related reports for each b whether (a, b) exists (likes and follows), a being of
// partition p.
func Related(db *DB, p int, k Kind, a uint64, bs []uint64) ([]bool, error) {
	out := make([]bool, len(bs))
	err := db.db.View(func(txn *badger.Txn) error {
		if k == Like {
			return relatedLikes(txn, p, a, bs, out)
		}
		return relatedKeys(txn, p, k, a, bs, out)
	})
	return out, err
}

// relatedKeys sets out[i] when the relation key (a, bs[i]) exists.
func relatedKeys(txn *badger.Txn, p int, k Kind, a uint64, bs []uint64, out []bool) error {
	for i, b := range bs {
		_, err := txn.Get(relKey(p, k, Rel{A: a, B: b}))
		switch {
		case err == nil:
			out[i] = true
		case !errors.Is(err, badger.ErrKeyNotFound):
			return err
		}
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
func List(db *DB, p int, k Kind, bySubject bool, id uint64, limit int, before string) (items []Item, next string, err error) {
	if !k.indexed() {
		return nil, "", fmt.Errorf("relation kind %c has no lists", k)
	}
	ns := byte(nsByObject)
	if bySubject {
		ns = nsBySubject
	}
	prefix := relPrefix(ns, p, k).u64(id)
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
	err = db.db.View(func(txn *badger.Txn) error {
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
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		var last []byte
		for it.Seek(start); it.ValidForPrefix(prefix); it.Next() {
			kb := it.Item().Key()
			if len(kb) != indexLen {
				return fmt.Errorf("%w: index key of %d bytes", ErrCorrupt, len(kb))
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
func CountRelations(db *DB, parts []int, posts, users []uint64) (Recount, error) {
	rc := Recount{Likes: make([]uint64, len(posts)), Comments: make([]uint64, len(posts)),
		Followers: make([]uint64, len(users)), Following: make([]uint64, len(users))}
	err := db.db.View(func(txn *badger.Txn) error {
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
				rc.Followers[i] += countPrefix(txn, relPrefix(nsByObject, p, Follow).u64(u))
				rc.Following[i] += countPrefix(txn, relPrefix(nsBySubject, p, Follow).u64(u))
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
func countComments(txn *badger.Txn, p int, at map[uint64][]int, comments []uint64) error {
	prefix := relPrefix(nsRelation, p, Comment)
	it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
	defer it.Close()
	for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
		kb := it.Item().Key()
		if len(kb) != relLen {
			return fmt.Errorf("%w: comment relation key of %d bytes", ErrCorrupt, len(kb))
		}
		for _, i := range at[u64at(kb, relOff+8)] {
			comments[i]++
		}
	}
	return nil
}

// countPrefix counts the keys under prefix without reading values.
func countPrefix(txn *badger.Txn, prefix []byte) uint64 {
	it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
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
func SampleRelated(db *DB, p int, k Kind, bySubject bool, n int, rand func() uint64) ([]uint64, error) {
	if !k.indexed() {
		return nil, fmt.Errorf("relation kind %c has no index to sample", k)
	}
	ns, keyLen := byte(nsByObject), indexLen
	switch {
	case k == Like && bySubject:
		ns, keyLen = nsLikes, relOff+8
	case k == Like:
		ns, keyLen = nsLikers, chunkLen
	case bySubject:
		ns = nsBySubject
	}
	prefix := relPrefix(ns, p, k)
	seen := map[uint64]bool{}
	var out []uint64
	err := db.db.View(func(txn *badger.Txn) error {
		// Pick within the ids present, [lo, hi], or small ids would hardly ever be hit.
		rev := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, Reverse: true})
		last := append(append(key{}, prefix...), bytes.Repeat([]byte{0xff}, 32)...) // ≥ every index key
		rev.Seek(last)
		if !rev.ValidForPrefix(prefix) {
			rev.Close()
			return nil // no relation of this kind at all
		}
		hi := u64at(rev.Item().Key(), idxID)
		rev.Close()
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		it.Seek(prefix)
		lo := u64at(it.Item().Key(), idxID)
		// next is the first id at or after from, wrapping around past the last.
		next := func(from uint64) (uint64, error) {
			it.Seek(append(key{}, prefix...).u64(from))
			if !it.ValidForPrefix(prefix) {
				it.Seek(prefix)
			}
			kb := it.Item().Key()
			if len(kb) != keyLen {
				return 0, fmt.Errorf("%w: list key of %d bytes", ErrCorrupt, len(kb))
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
