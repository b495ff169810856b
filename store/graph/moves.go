package graph

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/internal/keys"
	"github.com/tally-dev/tally/store/rel"
)

// moveLikes moves the likes of partitions from to to (both included) from the layout
// before like records and liker chunks (a relation key and two list keys per like, as a
// follow's) to theirs (likes.go): a post's likers to one chunk per second of like time,
// under batch 0; the likes of a user with at most maxLightLikes to a like record, those
// of the others staying where they are behind a heavy record. It returns the keys it
// rewrote. Each post's second and each user moves whole in one of w's transactions, which
// the caller commits last. Keys already in the new shape are left as they are, and a
// heavy user's are taken as a user of the old one's (a heavy user with few likes left
// turns light): moving a partition again, or one of the new layout, changes no answer.
func moveLikes(db *cold.DB, w *groupWriter, from, to int) (int, error) {
	// Likers: the O keys of one post and second, consecutive (newest first).
	var at key
	var group []liker
	moveLikers := func() error {
		if len(group) == 0 {
			return nil
		}
		p, post, sec := int(binary.BigEndian.Uint16(at[1:])), u64at(at, relOff), int64(u64at(at, relOff+8))
		return w.group(func(txn *cold.Txn) error {
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
			return fmt.Errorf("%w: like list key of %d bytes", cold.ErrCorrupt, len(kb))
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
		return w.group(func(txn *cold.Txn) error {
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
			return fmt.Errorf("%w: like key of %d bytes", cold.ErrCorrupt, len(kb))
		}
		if !bytes.Equal(kb[:relOff+8], user) {
			if err := moveUser(); err != nil {
				return err
			}
			user, list = append(key(nil), kb[:relOff+8]...), nil
		}
		st, err := rel.Unmarshal(v)
		if err != nil {
			return fmt.Errorf("%w: like key %x: %w", cold.ErrCorrupt, kb, err)
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
func eachLike(db *cold.DB, ns byte, from, to int, fn func(k, v []byte) error) (int, error) {
	n := 0
	err := db.View(func(txn *cold.Txn) error {
		prefix := []byte{ns}
		it := txn.Iterator(cold.IteratorOptions{Prefix: prefix, PrefetchValues: ns == keys.NSRelation})
		defer it.Close()
		for it.Seek(newKey(ns, 3).U16(from)); it.ValidForPrefix(prefix); {
			kb := it.Key()
			if len(kb) < relOff {
				return fmt.Errorf("%w: key %x", cold.ErrCorrupt, kb)
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
func moveLikeStates(db *cold.DB, w *groupWriter, from, to int) (int, error) {
	n := 0
	err := db.View(func(txn *cold.Txn) error {
		prefix := []byte{keys.NSLikes}
		it := txn.Iterator(cold.IteratorOptions{Prefix: prefix, PrefetchValues: true})
		defer it.Close()
		for it.Seek(newKey(keys.NSLikes, 3).U16(from)); it.ValidForPrefix(prefix); it.Next() {
			kb := it.KeyCopy(nil)
			if len(kb) < 3 {
				return fmt.Errorf("%w: key %x", cold.ErrCorrupt, kb)
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
				return fmt.Errorf("%w: like record %x: %w", cold.ErrCorrupt, kb, err)
			}
			u := u64at(kb, relOff)
			err = w.group(func(txn *cold.Txn) error {
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

// groupWriter writes groups of changes, each whole in one transaction, committing when
// a transaction has taken about maxGroupOps.
type groupWriter struct {
	db  *cold.DB
	txn *cold.Txn
	ops int
}

// maxGroupOps is a variable and commitFault exists for tests only: a small group and a
// failed commit stand for a large database and a crash halfway through a migration.
var (
	maxGroupOps = 10_000
	commitFault func() error
)

func (w *groupWriter) group(fn func(txn *cold.Txn) error, ops int) error {
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
