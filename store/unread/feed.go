package unread

import (
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/graph"
	"github.com/tally-dev/tally/store/internal/keys"
)

// PutPost records, in the author's partition p, that author posted post at place seq,
// and whether it was pushed to the followers' feed counters (otherwise every partition
// records it with PutPulled, and followers pull it when they ask).
func PutPost(txn *cold.Txn, p int, author, seq, post uint64, pushed bool) error {
	v := []byte{0}
	if pushed {
		v[0] = 1
	}
	return txn.Set(keys.New(keys.NSPosts, 27).U16(p).U64(author).U64(seq).U64(post), v)
}

// PutPulled records in partition p that author's post of place seq is pulled by the
// readers who follow author: a copy in every partition, so that a reader's unread feed
// is counted in the reader's own partition.
func PutPulled(txn *cold.Txn, p int, author, seq uint64) error {
	if err := txn.Set(keys.New(keys.NSPulled, 11).U16(p).U64(author), nil); err != nil {
		return err
	}
	return txn.Set(pulledPrefix(p, author).U64(seq), nil)
}

func pulledPrefix(p int, author uint64) keys.Key {
	return keys.New(keys.NSPulledAt, 19).U16(p).U64(author)
}

// CountPulled counts author's pulled posts recorded in partition p placed after seq,
// up to limit.
func CountPulled(txn *cold.Txn, p int, author, after uint64, limit uint64) uint64 {
	return countAfter(txn, pulledPrefix(p, author), after, limit)
}

// CountPosts counts the posts of author (of partition p) placed after seq that were
// pushed (pushed) or pulled (!pushed), up to limit.
func CountPosts(txn *cold.Txn, p int, author, after uint64, pushed bool, limit uint64) (uint64, error) {
	if after == ^uint64(0) || limit == 0 {
		return 0, nil
	}
	prefix := keys.New(keys.NSPosts, 11).U16(p).U64(author)
	var n uint64
	want := byte(0)
	if pushed {
		want = 1
	}
	err := txn.Scan(prefix, append(keys.Key{}, prefix...).U64(after+1), true, func(_, v []byte) (bool, error) {
		if len(v) != 1 {
			return false, fmt.Errorf("%w: post flag of %d bytes", cold.ErrCorrupt, len(v))
		}
		if v[0] == want {
			n++
		}
		return n < limit, nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

func arrivedPrefix(p int, author uint64) keys.Key {
	return keys.New(keys.NSArrived, 19).U16(p).U64(author)
}

// PutArrived records that partition p has applied author's pushed post of place seq.
func PutArrived(txn *cold.Txn, p int, author, seq uint64) error {
	return txn.Set(arrivedPrefix(p, author).U64(seq), nil)
}

// CountArrived counts author's pushed posts that partition p has applied, placed after seq.
func CountArrived(txn *cold.Txn, p int, author, after uint64) uint64 {
	return countAfter(txn, arrivedPrefix(p, author), after, ^uint64(0))
}

func followedPrefix(p int, author uint64) keys.Key {
	return keys.New(keys.NSFollowed, 19).U16(p).U64(author)
}

// PutFollowed records that uid, of partition p, follows author since place seq.
func PutFollowed(txn *cold.Txn, p int, author, uid, seq uint64) error {
	return txn.Set(followedPrefix(p, author).U64(uid), binary.BigEndian.AppendUint64(nil, seq))
}

// DeleteFollowed removes uid's follow of author from partition p's index.
func DeleteFollowed(txn *cold.Txn, p int, author, uid uint64) error {
	return txn.Delete(followedPrefix(p, author).U64(uid))
}

// followPlace decodes the place of a follow.
func followPlace(v []byte) (uint64, error) {
	if len(v) != 8 {
		return 0, fmt.Errorf("%w: follow place of %d bytes", cold.ErrCorrupt, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// GetFollowed returns the place of uid's follow of author (uid in partition p).
func GetFollowed(txn *cold.Txn, p int, author, uid uint64) (seq uint64, ok bool, err error) {
	ok, err = txn.Get(followedPrefix(p, author).U64(uid), func(v []byte) (err error) {
		seq, err = followPlace(v)
		return err
	})
	return seq, ok && err == nil, err
}

// Followed calls fn for each user of partition p who follows author, with the place of
// the follow, until fn returns false.
func Followed(txn *cold.Txn, p int, author uint64, fn func(uid, seq uint64) bool) error {
	prefix := followedPrefix(p, author)
	return txn.Scan(prefix, nil, true, func(k, v []byte) (bool, error) {
		seq, err := followPlace(v)
		if err != nil {
			return false, err
		}
		return fn(keys.U64At(k, len(prefix)), seq), nil
	})
}

// followsIndexedKey marks partition p's follow index as complete.
func followsIndexedKey(p int) keys.Key { return keys.New(keys.NSFollowed, 3).U16(p) }

// IndexFollows writes partition p's follow index for the follows made before it existed
// (by code that kept none), once: each follow of a user of p counts from place 0, before
// every post. Written in transactions of at most batch follows; after a crash it runs
// again, and it marks the index complete at the end.
func IndexFollows(db *cold.DB, p int, batch int) (int, error) {
	done := false
	if err := db.View(func(txn *cold.Txn) (err error) {
		done, err = txn.Get(followsIndexedKey(p), nil)
		return err
	}); err != nil || done {
		return 0, err
	}
	var pending [][2]uint64
	total := 0
	flush := func() error {
		if len(pending) == 0 {
			return nil
		}
		err := db.Update(func(txn *cold.Txn) error {
			for _, f := range pending {
				if _, ok, err := GetFollowed(txn, p, f[1], f[0]); err != nil || ok {
					if err != nil {
						return err
					}
					continue
				}
				if err := PutFollowed(txn, p, f[1], f[0], 0); err != nil {
					return err
				}
				a, err := GetAuthor(txn, p, f[1])
				if err != nil {
					return err
				}
				a.Followers++
				if err := PutAuthor(txn, p, f[1], a); err != nil {
					return err
				}
			}
			return nil
		})
		total += len(pending)
		pending = pending[:0]
		return err
	}
	err := graph.Follows(db, p, func(uid, author uint64) error {
		pending = append(pending, [2]uint64{uid, author})
		if len(pending) == batch {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err != nil {
		return total, err
	}
	return total, db.Update(func(txn *cold.Txn) error { return txn.Set(followsIndexedKey(p), nil) })
}

// AuthorState is what partition p keeps of an author for feed unread: how many of the
// partition's users follow them, and the place of their last pushed post that reached
// the partition, so that pushes, follows and unfollows look at the indexes only when
// there is something to find.
type AuthorState struct {
	Followers uint64 `msgpack:"f,omitempty"`
	Arrived   uint64 `msgpack:"a,omitempty"`
}

func authorKey(p int, author uint64) keys.Key {
	return keys.New(keys.NSAuthor, 11).U16(p).U64(author)
}

// GetAuthor returns partition p's state of author (zero if none).
func GetAuthor(txn *cold.Txn, p int, author uint64) (AuthorState, error) {
	var st AuthorState
	_, err := txn.Get(authorKey(p, author), func(v []byte) error {
		if err := msgpack.Unmarshal(v, &st); err != nil {
			return fmt.Errorf("%w: author %d in partition %d: %w", cold.ErrCorrupt, author, p, err)
		}
		return nil
	})
	return st, err
}

// PutAuthor stores partition p's state of author.
func PutAuthor(txn *cold.Txn, p int, author uint64, st AuthorState) error {
	b, err := msgpack.Marshal(&st)
	if err != nil {
		return err
	}
	return txn.Set(authorKey(p, author), b)
}

func feedReadPrefix(p int) keys.Key { return keys.New(keys.NSFeedRead, 19).U16(p) }

// PutFeedRead indexes uid's last feed read, at place seq, in partition p; prev is the
// place of the one before (0 if none), which it replaces.
func PutFeedRead(txn *cold.Txn, p int, uid, prev, seq uint64) error {
	if prev != 0 {
		if err := txn.Delete(feedReadPrefix(p).U64(prev).U64(uid)); err != nil {
			return err
		}
	}
	return txn.Set(feedReadPrefix(p).U64(seq).U64(uid), nil)
}

// FeedReadAfter calls fn for each user of partition p whose last feed read is placed
// after seq: a pushed post placed at seq is not theirs to count. Few are: a reader's
// read comes after a post only while the post is on its way to the partition.
func FeedReadAfter(txn *cold.Txn, p int, after uint64, fn func(uid uint64)) {
	prefix := feedReadPrefix(p)
	_ = txn.Scan(prefix, append(keys.Key{}, prefix...).U64(after+1), false, func(k, _ []byte) (bool, error) {
		if len(k) == len(prefix)+16 {
			fn(keys.U64At(k, len(prefix)+8))
		}
		return true, nil
	})
}

func noticePrefix(p int) keys.Key { return keys.New(keys.NSNotice, 11).U16(p) }

// PutNotice records that partition p counted the system notice of place seq.
func PutNotice(txn *cold.Txn, p int, seq uint64) error {
	return txn.Set(noticePrefix(p).U64(seq), nil)
}

// CountNotices counts the system notices partition p counted, placed after seq.
func CountNotices(txn *cold.Txn, p int, after uint64) uint64 {
	return countAfter(txn, noticePrefix(p), after, ^uint64(0))
}

// Pulled is the set of authors who have posts their followers pull, as partition p
// recorded them (PutPulled), kept in RAM so a reader following thousands of accounts is
// answered without a lookup per followee. It only grows (a pulled post stays pulled),
// so being shared by the stage that adds to it and the queries that read it needs no
// more than a read-write lock.
type Pulled struct {
	mu sync.RWMutex
	m  map[uint64]struct{}
}

// LoadPulled reads partition p's set from the database.
func LoadPulled(db *cold.DB, p int) (*Pulled, error) {
	pl := &Pulled{m: map[uint64]struct{}{}}
	prefix := keys.New(keys.NSPulled, 3).U16(p)
	err := db.View(func(txn *cold.Txn) error {
		return txn.Scan(prefix, nil, false, func(k, _ []byte) (bool, error) {
			if len(k) == len(prefix)+8 {
				pl.m[keys.U64At(k, len(prefix))] = struct{}{}
			}
			return true, nil
		})
	})
	return pl, err
}

// Add records that author has pulled posts.
func (p *Pulled) Add(author uint64) {
	p.mu.Lock()
	if p.m == nil {
		p.m = map[uint64]struct{}{}
	}
	p.m[author] = struct{}{}
	p.mu.Unlock()
}

// Has reports whether author has pulled posts.
func (p *Pulled) Has(author uint64) bool {
	p.mu.RLock()
	_, ok := p.m[author]
	p.mu.RUnlock()
	return ok
}
