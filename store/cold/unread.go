package cold

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/dgraph-io/badger/v4"

	"github.com/tally-dev/tally/store/rel"
)

// Unread state that is not a counter. Everything is keyed by the events' places in the
// events stream (pipeline.Event.Seq), never by time, so that what a read covers, what a
// follow sees and what an unfollow takes back do not depend on the order in which
// partitions apply what they hand each other.
const (
	nsReadSeq  = 'V' // V|partition|uid → ReaderState
	nsNotified = 'N' // N|partition|uid|kind|seq: a notification counted, until a read covers it
	nsPosts    = 'E' // E|partition|author|seq|post → 1 if pushed to followers, 0 if pulled
	nsPulled   = 'Q' // Q|partition|author: the author has posts that followers pull
	nsPulledAt = 'P' // P|partition|author|seq: a pulled post that partition has applied
	nsArrived  = 'h' // h|partition|author|seq: a pushed post that partition has applied
	nsFollowed = 'g' // g|partition|author|uid → seq of uid's follow of author (uid in partition)
	nsNotice   = 'z' // z|partition|seq: a system notice counted in that partition
	nsAuthor   = 'k' // k|partition|author → AuthorState
	nsFeedRead = 'b' // b|partition|seq|uid: uid's last feed read, by place
)

// unreadNamespaces are the event stages' unread keys, all of them partition p's under
// ns|p (see EventPart).
var unreadNamespaces = []byte{nsReadSeq, nsNotified, nsPosts, nsPulled, nsPulledAt, nsArrived, nsFollowed, nsNotice, nsAuthor, nsFeedRead}

// ReaderState is the place (Event.Seq) of a user's last read of each kind, and of the
// last notification of each kind recorded for them (so that a read looks for records
// only when there are some).
type ReaderState struct {
	Comment uint64 `msgpack:"c,omitempty"`
	Mention uint64 `msgpack:"m,omitempty"`
	Like    uint64 `msgpack:"l,omitempty"`
	DM      uint64 `msgpack:"d,omitempty"`
	Feed    uint64 `msgpack:"f,omitempty"`
	System  uint64 `msgpack:"s,omitempty"`
	// Noted is the place of the last notification recorded, per kind (comment,
	// mention, like, dm).
	Noted [4]uint64 `msgpack:"n,omitempty"`
	// Pending are the places of the notifications of each kind recorded in the state
	// itself, ascending (see AddNote); Keyed is how far those recorded under keys of
	// their own may go. Inline is false in a state written before them, whose
	// notifications are all keys, up to Noted. Pending's slices are never written in
	// place — a changed one is a copy — since a resident state shares them.
	Pending [4][]uint64 `msgpack:"p,omitempty"`
	Keyed   [4]uint64   `msgpack:"k,omitempty"`
	Inline  bool        `msgpack:"i,omitempty"`
}

// Note returns where the place of the last recorded notification of kind is kept.
func (r *ReaderState) Note(kind string) *uint64 { return &r.Noted[noteIndex(kind)] }

// noteIndex is a notification kind's index in Noted, Pending and Keyed: comment,
// mention, like, dm.
func noteIndex(kind string) int {
	switch kind {
	case "comment":
		return 0
	case "mention":
		return 1
	case "like":
		return 2
	}
	return 3
}

// Read returns where the last read of kind is kept (nil for an unknown kind).
func (r *ReaderState) Read(kind string) *uint64 {
	switch kind {
	case "comment":
		return &r.Comment
	case "mention":
		return &r.Mention
	case "like":
		return &r.Like
	case "dm":
		return &r.DM
	case "feed":
		return &r.Feed
	case "system":
		return &r.System
	}
	return nil
}

func readerKey(p int, uid uint64) key { return newKey(nsReadSeq, 11).u16(p).u64(uid) }

// GetReader returns the reader state of uid, of partition p (zero if none).
func GetReader(txn *Txn, p int, uid uint64) (ReaderState, error) {
	item, err := txn.get(readerKey(p, uid))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return ReaderState{}, nil
	} else if err != nil {
		return ReaderState{}, err
	}
	var st ReaderState
	err = item.Value(func(v []byte) (err error) { st, err = decodeReader(v); return err })
	if err != nil {
		return ReaderState{}, fmt.Errorf("%w: reader %d: %w", ErrCorrupt, uid, err)
	}
	return st, nil
}

// PutReader stores the reader state of uid, of partition p.
func PutReader(txn *Txn, p int, uid uint64, st ReaderState) error {
	return txn.Set(readerKey(p, uid), appendReader(make([]byte, 0, 32), &st))
}

// kindByte is a notification kind in keys: its first letter (comment, mention, like, dm).
func kindByte(kind string) byte { return kind[0] }

func notifiedPrefix(p int, uid uint64, kind string) key {
	return newKey(nsNotified, 20).u16(p).u64(uid).u8(kindByte(kind))
}

// AddNotified records that a notification of kind for uid (of partition p), of place
// seq, was counted.
func AddNotified(txn *Txn, p int, uid uint64, kind string, seq uint64) error {
	return txn.Set(notifiedPrefix(p, uid, kind).u64(seq), nil)
}

// DeleteNotified removes the record of uid's notification of kind placed at seq.
func DeleteNotified(txn *Txn, p int, uid uint64, kind string, seq uint64) error {
	return txn.Delete(notifiedPrefix(p, uid, kind).u64(seq))
}

// CountNotified counts uid's recorded notifications of kind placed after seq.
func CountNotified(txn *Txn, p int, uid uint64, kind string, after uint64) uint64 {
	return countAfter(txn, notifiedPrefix(p, uid, kind), after)
}

// DropNotified deletes up to limit of uid's recorded notifications of kind placed at or
// before through: a read covers them, and nothing counts them again.
func DropNotified(txn *Txn, p int, uid uint64, kind string, through uint64, limit int) error {
	prefix := notifiedPrefix(p, uid, kind)
	it := txn.iterator(badger.IteratorOptions{Prefix: prefix})
	var drop []key
	for it.Seek(prefix); it.ValidForPrefix(prefix) && len(drop) < limit; it.Next() {
		k := it.Item().Key()
		if len(k) != len(prefix)+8 || u64at(k, len(prefix)) > through {
			break
		}
		drop = append(drop, it.Item().KeyCopy(nil))
	}
	it.Close()
	for _, k := range drop {
		if err := txn.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// countAfter counts the keys prefix|seq (with anything after seq) with seq > after.
func countAfter(txn *Txn, prefix key, after uint64) uint64 {
	if after == ^uint64(0) {
		return 0
	}
	it := txn.iterator(badger.IteratorOptions{Prefix: prefix})
	defer it.Close()
	var n uint64
	for it.Seek(append(key{}, prefix...).u64(after + 1)); it.ValidForPrefix(prefix); it.Next() {
		n++
	}
	return n
}

// PutPost records, in the author's partition p, that author posted post at place seq,
// and whether it was pushed to the followers' feed counters (otherwise every partition
// records it with PutPulled, and followers pull it when they ask).
func PutPost(txn *Txn, p int, author, seq, post uint64, pushed bool) error {
	v := []byte{0}
	if pushed {
		v[0] = 1
	}
	return txn.Set(newKey(nsPosts, 27).u16(p).u64(author).u64(seq).u64(post), v)
}

// PutPulled records in partition p that author's post of place seq is pulled by the
// readers who follow author: a copy in every partition, so that a reader's unread feed
// is counted in the reader's own partition.
func PutPulled(txn *Txn, p int, author, seq uint64) error {
	if err := txn.Set(newKey(nsPulled, 11).u16(p).u64(author), nil); err != nil {
		return err
	}
	return txn.Set(pulledPrefix(p, author).u64(seq), nil)
}

func pulledPrefix(p int, author uint64) key { return newKey(nsPulledAt, 19).u16(p).u64(author) }

// CountPulled counts author's pulled posts recorded in partition p placed after seq,
// up to limit.
func CountPulled(txn *Txn, p int, author, after uint64, limit uint64) uint64 {
	if after == ^uint64(0) {
		return 0
	}
	prefix := pulledPrefix(p, author)
	it := txn.iterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: false})
	defer it.Close()
	var n uint64
	for it.Seek(append(key{}, prefix...).u64(after + 1)); it.ValidForPrefix(prefix) && n < limit; it.Next() {
		n++
	}
	return n
}

// CountPosts counts the posts of author (of partition p) placed after seq that were
// pushed (pushed) or pulled (!pushed), up to limit.
func CountPosts(txn *Txn, p int, author, after uint64, pushed bool, limit uint64) (uint64, error) {
	if after == ^uint64(0) {
		return 0, nil
	}
	prefix := newKey(nsPosts, 11).u16(p).u64(author)
	it := txn.iterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: false})
	defer it.Close()
	var n uint64
	want := byte(0)
	if pushed {
		want = 1
	}
	for it.Seek(append(key{}, prefix...).u64(after + 1)); it.ValidForPrefix(prefix) && n < limit; it.Next() {
		err := it.Item().Value(func(v []byte) error {
			if len(v) != 1 {
				return fmt.Errorf("%w: post flag of %d bytes", ErrCorrupt, len(v))
			}
			if v[0] == want {
				n++
			}
			return nil
		})
		if err != nil {
			return 0, err
		}
	}
	return n, nil
}

func arrivedPrefix(p int, author uint64) key { return newKey(nsArrived, 19).u16(p).u64(author) }

// PutArrived records that partition p has applied author's pushed post of place seq.
func PutArrived(txn *Txn, p int, author, seq uint64) error {
	return txn.Set(arrivedPrefix(p, author).u64(seq), nil)
}

// CountArrived counts author's pushed posts that partition p has applied, placed after seq.
func CountArrived(txn *Txn, p int, author, after uint64) uint64 {
	return countAfter(txn, arrivedPrefix(p, author), after)
}

func followedPrefix(p int, author uint64) key { return newKey(nsFollowed, 19).u16(p).u64(author) }

// PutFollowed records that uid, of partition p, follows author since place seq.
func PutFollowed(txn *Txn, p int, author, uid, seq uint64) error {
	return txn.Set(followedPrefix(p, author).u64(uid), binary.BigEndian.AppendUint64(nil, seq))
}

// DeleteFollowed removes uid's follow of author from partition p's index.
func DeleteFollowed(txn *Txn, p int, author, uid uint64) error {
	return txn.Delete(followedPrefix(p, author).u64(uid))
}

// GetFollowed returns the place of uid's follow of author (uid in partition p).
func GetFollowed(txn *Txn, p int, author, uid uint64) (seq uint64, ok bool, err error) {
	item, err := txn.get(followedPrefix(p, author).u64(uid))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return 0, false, nil
	} else if err != nil {
		return 0, false, err
	}
	err = item.Value(func(v []byte) error {
		if len(v) != 8 {
			return fmt.Errorf("%w: follow place of %d bytes", ErrCorrupt, len(v))
		}
		seq = binary.BigEndian.Uint64(v)
		return nil
	})
	return seq, err == nil, err
}

// Followed calls fn for each user of partition p who follows author, with the place of
// the follow, until fn returns false.
func Followed(txn *Txn, p int, author uint64, fn func(uid, seq uint64) bool) error {
	prefix := followedPrefix(p, author)
	it := txn.iterator(badger.IteratorOptions{Prefix: prefix, PrefetchSize: 256})
	defer it.Close()
	for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
		var seq uint64
		err := it.Item().Value(func(v []byte) error {
			if len(v) != 8 {
				return fmt.Errorf("%w: follow place of %d bytes", ErrCorrupt, len(v))
			}
			seq = binary.BigEndian.Uint64(v)
			return nil
		})
		if err != nil {
			return err
		}
		if !fn(u64at(it.Item().Key(), len(prefix)), seq) {
			return nil
		}
	}
	return nil
}

// followsIndexedKey marks partition p's follow index as complete.
func followsIndexedKey(p int) key { return newKey(nsFollowed, 3).u16(p) }

// IndexFollows writes partition p's follow index for the follows made before it existed
// (by code that kept none), once: each follow of a user of p counts from place 0, before
// every post. Written in transactions of at most batch follows; after a crash it runs
// again, and it marks the index complete at the end.
func IndexFollows(db *DB, p int, batch int) (int, error) {
	done := false
	if err := db.View(func(txn *Txn) error {
		_, err := txn.get(followsIndexedKey(p))
		done = err == nil
		if errors.Is(err, badger.ErrKeyNotFound) {
			err = nil
		}
		return err
	}); err != nil || done {
		return 0, err
	}
	prefix := relPrefix(nsRelation, p, Follow)
	var pending [][2]uint64
	total := 0
	flush := func() error {
		if len(pending) == 0 {
			return nil
		}
		err := db.Update(func(txn *Txn) error {
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
	err := db.View(func(txn *Txn) error {
		it := txn.iterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true})
		defer it.Close()
		for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
			k := it.Item().Key()
			if len(k) != relLen {
				continue
			}
			var st rel.State
			if err := it.Item().Value(func(v []byte) (err error) { st, err = rel.Unmarshal(v); return err }); err != nil {
				return fmt.Errorf("%w: follow %x: %w", ErrCorrupt, k, err)
			}
			if !st.On {
				continue // undone: a tombstone
			}
			pending = append(pending, [2]uint64{u64at(k, relOff), u64at(k, relOff+8)})
			if len(pending) == batch {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err != nil {
		return total, err
	}
	return total, db.Update(func(txn *Txn) error { return txn.Set(followsIndexedKey(p), nil) })
}

// AuthorState is what partition p keeps of an author for feed unread: how many of the
// partition's users follow them, and the place of their last pushed post that reached
// the partition, so that pushes, follows and unfollows look at the indexes only when
// there is something to find.
type AuthorState struct {
	Followers uint64 `msgpack:"f,omitempty"`
	Arrived   uint64 `msgpack:"a,omitempty"`
}

func authorKey(p int, author uint64) key { return newKey(nsAuthor, 11).u16(p).u64(author) }

// GetAuthor returns partition p's state of author (zero if none).
func GetAuthor(txn *Txn, p int, author uint64) (AuthorState, error) {
	var st AuthorState
	_, err := getValue(txn, authorKey(p, author), &st, fmt.Sprintf("author %d in partition %d", author, p))
	return st, err
}

// PutAuthor stores partition p's state of author.
func PutAuthor(txn *Txn, p int, author uint64, st AuthorState) error {
	return putValue(txn, authorKey(p, author), &st)
}

func feedReadPrefix(p int) key { return newKey(nsFeedRead, 19).u16(p) }

// PutFeedRead indexes uid's last feed read, at place seq, in partition p; prev is the
// place of the one before (0 if none), which it replaces.
func PutFeedRead(txn *Txn, p int, uid, prev, seq uint64) error {
	if prev != 0 {
		if err := txn.Delete(feedReadPrefix(p).u64(prev).u64(uid)); err != nil {
			return err
		}
	}
	return txn.Set(feedReadPrefix(p).u64(seq).u64(uid), nil)
}

// FeedReadAfter calls fn for each user of partition p whose last feed read is placed
// after seq: a pushed post placed at seq is not theirs to count. Few are: a reader's
// read comes after a post only while the post is on its way to the partition.
func FeedReadAfter(txn *Txn, p int, after uint64, fn func(uid uint64)) {
	prefix := feedReadPrefix(p)
	it := txn.iterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: false})
	defer it.Close()
	for it.Seek(append(key{}, prefix...).u64(after + 1)); it.ValidForPrefix(prefix); it.Next() {
		if k := it.Item().Key(); len(k) == len(prefix)+16 {
			fn(u64at(k, len(prefix)+8))
		}
	}
}

func noticePrefix(p int) key { return newKey(nsNotice, 11).u16(p) }

// PutNotice records that partition p counted the system notice of place seq.
func PutNotice(txn *Txn, p int, seq uint64) error {
	return txn.Set(noticePrefix(p).u64(seq), nil)
}

// CountNotices counts the system notices partition p counted, placed after seq.
func CountNotices(txn *Txn, p int, after uint64) uint64 {
	return countAfter(txn, noticePrefix(p), after)
}

// storedCounts reads the checkpointed counters of one id (all zeros if none). It lags
// the counter worker's RAM by at most one flush.
func storedCounts(txn *Txn, family string, p int, id uint64, dst []uint64) error {
	clear(dst)
	item, err := txn.get(counterPrefix(family, p).u64(id))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil
	} else if err != nil {
		return err
	}
	return item.Value(func(v []byte) error { return unpackCounts(v, dst) })
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
func LoadPulled(db *DB, p int) (*Pulled, error) {
	pl := &Pulled{m: map[uint64]struct{}{}}
	err := db.View(func(txn *Txn) error {
		prefix := newKey(nsPulled, 3).u16(p)
		it := txn.iterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
			if k := it.Item().Key(); len(k) == len(prefix)+8 {
				pl.m[u64at(k, len(prefix))] = struct{}{}
			}
		}
		return nil
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
