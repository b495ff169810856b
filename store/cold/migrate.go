package cold

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/dgraph-io/badger/v4"

	"github.com/tally-dev/tally/store/internal/keys"
	"github.com/tally-dev/tally/store/rel"
)

// The layout before every event-stage key carried its partition: relations, readers,
// notifications and posts were keyed by id alone, and the processes that shared a
// database read each other's. Migrate moves them under their partitions.
const (
	nsRelationV0  = 'r' // r|kind|a|b|c
	nsBySubjectV0 = 's' // s|kind|a|^time|b|c
	nsByObjectV0  = 'o' // o|kind|b|^time|a|c
	nsReadSeqV0   = 'v' // v|uid
	nsNotifiedV0  = 'n' // n|uid|kind|seq
	nsPostsV0     = 'e' // e|author|seq|post → pushed
	nsPulledV0    = 'q' // q|author
	nsReaderV1    = 'u' // written before places were used; nothing reads them
	nsPostV1      = 't'
	nsSystemV1    = 'y'
)

// Migrate moves the keys of the old layout to the partitions that own them now, with
// partitions partitions and partOf the partition of an id, then through every later
// layout (layoutSteps): a relation and its subject's
// list go to the subject's partition, a follow's follower list to the followed user's, a
// reader's state and notifications to the reader's, a post to its author's. A pulled post
// is recorded in every partition (see PutPulled). It returns how many keys it moved; a
// database in the new layout moves none, after one look per old namespace. It is
// idempotent: a crash halfway leaves old keys that the next call moves again. Once all
// is moved it records the database's layout; it refuses a database that records a
// newer one than this code knows (ErrNewerLayout), before changing anything.
func Migrate(db *DB, partitions int, partOf func(id uint64) int) (int, error) {
	if l, err := db.layout(); err != nil {
		return 0, err
	} else if l > Layout {
		return 0, fmt.Errorf("%w: the database is of layout %d, this tallyd knows layouts up to %d: run a tallyd of layout %d or newer on it", ErrNewerLayout, l, Layout, l)
	}
	moved := 0
	for _, ns := range []byte{nsRelationV0, nsBySubjectV0, nsByObjectV0, nsReadSeqV0, nsNotifiedV0, nsPostsV0, nsPulledV0, nsReaderV1, nsPostV1, nsSystemV1} {
		n, err := db.migrate(ns, func(k, v []byte, set func(key, []byte) error) error {
			return moveKey(k, v, partitions, partOf, set)
		})
		moved += n
		if err != nil {
			return moved, fmt.Errorf("cannot move the keys of namespace %q to their partitions: %w", ns, err)
		}
	}
	for _, step := range layoutSteps {
		n, err := migrateOnce(db, step.mark, step.move)
		if moved += n; err != nil {
			return moved, err
		}
	}
	if l, err := db.layout(); err != nil || l == Layout {
		return moved, err
	}
	return moved, db.setLayout()
}

// moveKey writes through set the new keys of one old key (none for what nothing reads).
func moveKey(k, v []byte, partitions int, partOf func(uint64) int, set func(key, []byte) error) error {
	bad := fmt.Errorf("%w: old key %x", ErrCorrupt, k)
	rest := k[1:]
	switch k[0] {
	case nsRelationV0, nsBySubjectV0, nsByObjectV0:
		if (k[0] == nsRelationV0 && len(k) != 26) || (k[0] != nsRelationV0 && len(k) != 34) {
			return bad
		}
		ns := map[byte]byte{nsRelationV0: keys.NSRelation, nsBySubjectV0: keys.NSBySubject, nsByObjectV0: keys.NSByObject}[k[0]]
		owner := u64at(k, 2) // the subject, first
		if k[0] == nsByObjectV0 && Kind(k[1]) != Follow {
			owner = u64at(k, 18) // a like's likers stay with the likers
		}
		return set(newKey(ns, len(k)+2).U16(partOf(owner)).U8(k[1]).Bytes(k[2:]), v)
	case nsReadSeqV0, nsNotifiedV0:
		if len(rest) < 8 {
			return bad
		}
		ns := map[byte]byte{nsReadSeqV0: keys.NSReader, nsNotifiedV0: keys.NSNotified}[k[0]]
		return set(newKey(ns, len(k)+2).U16(partOf(u64at(k, 1))).Bytes(rest), v)
	case nsPostsV0:
		if len(k) != 25 || len(v) != 1 {
			return bad
		}
		author := u64at(k, 1)
		if err := set(newKey(keys.NSPosts, 27).U16(partOf(author)).Bytes(rest), v); err != nil {
			return err
		}
		if v[0] == 0 { // pulled: every partition's readers count it
			for q := range partitions {
				if err := set(newKey(keys.NSPulled, 11).U16(q).U64(author), nil); err != nil {
					return err
				}
				if err := set(newKey(keys.NSPulledAt, 19).U16(q).U64(author).U64(u64at(k, 9)), nil); err != nil {
					return err
				}
			}
		}
	}
	return nil // pulled sets are made again from the posts; the oldest keys go
}

// migrate rewrites every key under the namespace byte ns through move and deletes it.
func (d *DB) migrate(ns byte, move func(k, v []byte, set func(key, []byte) error) error) (int, error) {
	wb := d.NewBatch()
	defer wb.Cancel()
	n := 0
	err := d.View(func(txn *Txn) error {
		prefix := []byte{ns}
		it := txn.Iterator(IteratorOptions{Prefix: prefix, PrefetchValues: true})
		defer it.Close()
		for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
			k := it.KeyCopy(nil)
			v, err := it.ValueCopy(nil)
			if err != nil {
				return err
			}
			if err := move(k, v, func(nk key, nv []byte) error { return wb.Set(nk, nv) }); err != nil {
				return err
			}
			if err := wb.Delete(k); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	if err != nil {
		return n, err
	}
	return n, wb.Flush()
}

// migrateOnce runs move over every partition unless the layout mark name says it ran:
// the mark is set once all has moved, in the last transaction, so a crash halfway moves
// the rest at the next call, and later calls read one key.
func migrateOnce(db *DB, name string, move func(db *DB, w *groupWriter, from, to int) (int, error)) (int, error) {
	done := newKey(keys.NSLayout, 1+len(name)).Bytes([]byte(name))
	if err := db.View(func(txn *Txn) error { _, err := txn.get(done); return err }); err == nil {
		return 0, nil
	} else if !errors.Is(err, badger.ErrKeyNotFound) {
		return 0, err
	}
	w := &groupWriter{db: db}
	defer w.discard()
	n, err := move(db, w, 0, math.MaxUint16)
	if err == nil {
		err = w.group(func(txn *Txn) error { return txn.Set(done, nil) }, 1)
	}
	if err != nil {
		return n, err
	}
	return n, w.commit()
}

// moveLikes moves the likes of partitions from to to (both included) from the layout
// before like records and liker chunks (a relation key and two list keys per like, as a
// follow's) to theirs (likes.go): a post's likers to one chunk per second of like time,
// under batch 0; the likes of a user with at most maxLightLikes to a like record, those
// of the others staying where they are behind a heavy record. It returns the keys it
// rewrote. Each post's second and each user moves whole in one of w's transactions, which
// the caller commits last. Keys already in the new shape are left as they are, and a
// heavy user's are taken as a user of the old one's (a heavy user with few likes left
// turns light): moving a partition again, or one of the new layout, changes no answer.
func moveLikes(db *DB, w *groupWriter, from, to int) (int, error) {
	// Likers: the O keys of one post and second, consecutive (newest first).
	var at key
	var group []liker
	moveLikers := func() error {
		if len(group) == 0 {
			return nil
		}
		p, post, sec := int(binary.BigEndian.Uint16(at[1:])), u64at(at, relOff), int64(u64at(at, relOff+8))
		return w.group(func(txn *Txn) error {
			for _, l := range group {
				if err := txn.Delete(objectKey(p, Like, Rel{A: l.user, B: post}, l.ts)); err != nil {
					return err
				}
			}
			k := likersKey(p, post, sec, 0)
			old, err := chunk(txn, k)
			if err != nil {
				return err
			}
			return txn.Set(k, encodeLikers(append(old, group...)))
		}, len(group)+1)
	}
	n, err := eachLike(db, keys.NSByObject, from, to, func(kb, _ []byte) error {
		if len(kb) != indexLen {
			return fmt.Errorf("%w: like list key of %d bytes", ErrCorrupt, len(kb))
		}
		ts := int64(math.MaxUint64 - u64at(kb, idxTS))
		here := append(key(nil), kb[:relOff+8]...).U64(uint64(secondOf(ts)))
		if !bytes.Equal(here, at) || len(group) == maxGroupOps/2 {
			if err := moveLikers(); err != nil {
				return err
			}
			at, group = here, group[:0]
		}
		group = append(group, liker{user: u64at(kb, idxOther), ts: ts})
		return nil
	})
	if err == nil {
		err = moveLikers()
	}
	if err != nil {
		return n, fmt.Errorf("cannot move the likers of posts to chunks: %w", err)
	}
	// Likes: the R keys of one user, consecutive.
	var user key
	var list []like
	moveUser := func() error {
		if user == nil {
			return nil
		}
		p, u := int(binary.BigEndian.Uint16(user[1:])), u64at(user, relOff)
		r := &likes{heavy: len(list) > maxLightLikes, list: list}
		if r.heavy {
			list = nil
		}
		return w.group(func(txn *Txn) error {
			if !r.heavy {
				for _, e := range list {
					rel := Rel{A: u, B: e.post}
					if err := txn.Delete(relKey(p, Like, rel)); err != nil {
						return err
					}
					if err := txn.Delete(subjectKey(p, Like, rel, e.Made.TS)); err != nil {
						return err
					}
				}
				slices.SortFunc(list, recordOrder)
			}
			return txn.Set(likesKey(p, u), r.encode())
		}, 2*len(list)+1)
	}
	m, err := eachLike(db, keys.NSRelation, from, to, func(kb, v []byte) error {
		if len(kb) != relLen {
			return fmt.Errorf("%w: like key of %d bytes", ErrCorrupt, len(kb))
		}
		if !bytes.Equal(kb[:relOff+8], user) {
			if err := moveUser(); err != nil {
				return err
			}
			user, list = append(key(nil), kb[:relOff+8]...), nil
		}
		st, err := rel.Unmarshal(v)
		if err != nil {
			return fmt.Errorf("%w: like key %x: %w", ErrCorrupt, kb, err)
		}
		e := like{post: u64at(kb, relOff+8), State: st}
		if len(list) <= maxLightLikes { // past that, heavy: it is enough to know
			list = append(list, e)
		}
		return nil
	})
	n += m
	if err == nil {
		err = moveUser()
	}
	if err != nil {
		return n, fmt.Errorf("cannot move the likes of users to like records: %w", err)
	}
	return n, nil
}

// eachLike calls fn for every key of namespace ns (of the partitioned layout) whose kind
// is Like in partitions from to to (both included), with its value, in key order; it
// returns how many.
func eachLike(db *DB, ns byte, from, to int, fn func(k, v []byte) error) (int, error) {
	n := 0
	err := db.View(func(txn *Txn) error {
		prefix := []byte{ns}
		it := txn.Iterator(IteratorOptions{Prefix: prefix, PrefetchValues: ns == keys.NSRelation})
		defer it.Close()
		for it.Seek(newKey(ns, 3).U16(from)); it.ValidForPrefix(prefix); {
			kb := it.Key()
			if len(kb) < relOff {
				return fmt.Errorf("%w: key %x", ErrCorrupt, kb)
			}
			p := int(binary.BigEndian.Uint16(kb[1:]))
			switch kind := kb[3]; {
			case p > to:
				return nil
			case kind < byte(Like):
				it.Seek(relPrefix(ns, p, Like))
				continue
			case kind > byte(Like):
				if p == math.MaxUint16 {
					return nil
				}
				it.Seek(newKey(ns, 3).U16(p + 1))
				continue
			}
			v, err := it.ValueCopy(nil)
			if err != nil {
				return err
			}
			if err := fn(it.KeyCopy(nil), v); err != nil {
				return err
			}
			n++
			it.Next()
		}
		return nil
	})
	return n, err
}

// groupWriter writes groups of changes, each whole in one transaction, committing when
// a transaction has taken about maxGroupOps.
type groupWriter struct {
	db  *DB
	txn *Txn
	ops int
}

// maxGroupOps is a variable and commitFault exists for tests only: a small group and a
// failed commit stand for a large database and a crash halfway through a migration.
var (
	maxGroupOps = 10_000
	commitFault func() error
)

func (w *groupWriter) group(fn func(txn *Txn) error, ops int) error {
	if w.txn != nil && w.ops+ops > maxGroupOps {
		if err := w.commit(); err != nil {
			return err
		}
	}
	if w.txn == nil {
		w.txn, w.ops = w.db.NewTxn(true), 0
	}
	w.ops += ops
	return fn(w.txn)
}

func (w *groupWriter) commit() error {
	if w.txn == nil {
		return nil
	}
	if commitFault != nil {
		if err := commitFault(); err != nil {
			w.discard()
			w.txn = nil
			return err
		}
	}
	err := w.txn.Commit()
	w.txn = nil
	return err
}

func (w *groupWriter) discard() {
	if w.txn != nil {
		w.txn.Discard()
	}
}

// legacyRecordKind is the kind byte of the like records written before relation
// states: L|p|'l'|u → post, time and place (24 bytes) per like, newest first, or one
// byte 0xff for a heavy user.
const legacyRecordKind = byte(Like)

// moveLikeStates moves the like records of partitions from to to (both included) of the
// layout before relation states (L|p|'l'|u: post, time and place per like, or 0xff for a
// heavy user) to theirs (likes.go): each like a state made at its place. The relation
// keys of heavy users need nothing: rel.Unmarshal reads their old values. Each record
// moves whole in one of w's transactions, which the caller commits last. It returns the
// records moved.
func moveLikeStates(db *DB, w *groupWriter, from, to int) (int, error) {
	n := 0
	err := db.View(func(txn *Txn) error {
		prefix := []byte{keys.NSLikes}
		it := txn.Iterator(IteratorOptions{Prefix: prefix, PrefetchValues: true})
		defer it.Close()
		for it.Seek(newKey(keys.NSLikes, 3).U16(from)); it.ValidForPrefix(prefix); it.Next() {
			kb := it.KeyCopy(nil)
			if len(kb) < 3 {
				return fmt.Errorf("%w: key %x", ErrCorrupt, kb)
			}
			p := int(binary.BigEndian.Uint16(kb[1:]))
			if p > to {
				return nil
			}
			if len(kb) != relOff+8 || kb[relOff-1] != legacyRecordKind {
				continue
			}
			v, err := it.ValueCopy(nil)
			if err != nil {
				return err
			}
			r, err := decodeLegacyLikes(v)
			if err != nil {
				return fmt.Errorf("%w: like record %x: %w", ErrCorrupt, kb, err)
			}
			u := u64at(kb, relOff)
			err = w.group(func(txn *Txn) error {
				if err := txn.Delete(kb); err != nil {
					return err
				}
				return txn.Set(likesKey(p, u), r.encode())
			}, 2)
			if err != nil {
				return err
			}
			n++
		}
		return nil
	})
	if err != nil {
		return n, fmt.Errorf("cannot move like records to relation states: %w", err)
	}
	return n, nil
}

// decodeLegacyLikes reads a like record of the layout before relation states.
func decodeLegacyLikes(v []byte) (*likes, error) {
	const size = 24 // post, time, place
	if len(v) == 1 && v[0] == 0xff {
		return &likes{heavy: true}, nil
	}
	if len(v)%size != 0 || len(v)/size > maxLightLikes {
		return nil, fmt.Errorf("legacy like record of %d bytes", len(v))
	}
	l := &likes{}
	for b := v; len(b) > 0; b = b[size:] {
		l.list = append(l.list, like{post: u64at(b, 0), State: rel.State{On: true, Made: rel.Event{TS: int64(u64at(b, 8)), Place: u64at(b, 16)}}})
	}
	slices.SortFunc(l.list, recordOrder)
	return l, nil
}
