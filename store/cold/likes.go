package cold

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/dgraph-io/badger/v4"
)

// Likes are kept so that most cost one write, where a follow costs three (its relation
// and a list key on each side):
//
//   - A user's likes, in the user's partition p, are one like record L|p|l|u. While the
//     user has at most maxLightLikes likes it holds them, newest first: post, time and
//     place, 24 bytes each. A like rewrites it: one write, whose Get also answers liked
//     and likes.user. Past that the user is heavy: the record is one byte, and each like
//     is a relation key R|p|l|u|post (time, place) and a list key S|p|l|u|^time|post|0,
//     as a follow's subject side is. Heavy users stay heavy.
//   - A post's likers, in the likers' partition p, are liker chunks
//     K|p|l|post|^second|batch: the likers of one post in one second of like time that
//     one batch (an event-stage transaction) added, newest first, user and time, 16
//     bytes each. A batch writes one chunk per post and second it liked, however many
//     likes that post had in it: a popular post costs a fraction of a write per like.
//     An unlike rewrites the chunk that holds it.
//
// Lists order as every relation list does: newest first, then by the other side's id;
// a cursor is the same 24 bytes (^time, other side, 0) in every partition and shape.
const (
	nsLikes  = 'L' // L|partition|'l'|user → like record
	nsLikers = 'K' // K|partition|'l'|post|^second|batch → liker chunk
)

// maxLightLikes is the most likes a like record holds before its user turns heavy.
const maxLightLikes = 32

const (
	likeSize  = 24 // post, time, place
	likerSize = 16 // user, time
	heavy     = 0xff
	chunkLen  = relOff + 24 // post, ^second, batch
)

// like is one like of a like record.
type like struct {
	post uint64
	ts   int64
	seq  uint64
}

// likes is one user's like record: the likes of a light user, newest first.
type likes struct {
	heavy bool
	list  []like
	dirty bool // changed by the batch: written at Flush
}

func likesKey(p int, u uint64) key { return relPrefix(nsLikes, p, Like).u64(u) }

// likersKey is a chunk's key; second is the like time's second (time in milliseconds).
func likersKey(p int, post uint64, second int64, batch uint64) key {
	return likersSecond(p, post, second).u64(batch)
}

func likersSecond(p int, post uint64, second int64) key {
	return relPrefix(nsLikers, p, Like).u64(post).u64(math.MaxUint64 - uint64(second))
}

func secondOf(ts int64) int64 { return ts / 1000 }

// newestFirst orders likes and likers as lists are: newest first (like time ts), then
// by the other side's id.
func newestFirst(ts int64, id uint64, t int64, o uint64) int {
	return cmp.Or(cmp.Compare(t, ts), cmp.Compare(id, o))
}

// before reports whether like time ts and other side id order before (newer than) t, o.
func before(ts int64, id uint64, t int64, o uint64) bool { return newestFirst(ts, id, t, o) < 0 }

func likersNewestFirst(a, b liker) int { return newestFirst(a.ts, a.user, b.ts, b.user) }

func decodeLikes(v []byte) (*likes, error) {
	if len(v) == 1 && v[0] == heavy {
		return &likes{heavy: true}, nil
	}
	if len(v)%likeSize != 0 {
		return nil, fmt.Errorf("%w: like record of %d bytes", ErrCorrupt, len(v))
	}
	l := &likes{list: make([]like, len(v)/likeSize)}
	for i := range l.list {
		b := v[i*likeSize:]
		l.list[i] = like{post: u64at(b, 0), ts: int64(u64at(b, 8)), seq: u64at(b, 16)}
	}
	return l, nil
}

func (l *likes) encode() []byte {
	if l.heavy {
		return []byte{heavy}
	}
	v := make([]byte, 0, len(l.list)*likeSize)
	for _, e := range l.list {
		v = binary.BigEndian.AppendUint64(v, e.post)
		v = binary.BigEndian.AppendUint64(v, uint64(e.ts))
		v = binary.BigEndian.AppendUint64(v, e.seq)
	}
	return v
}

func (l *likes) find(post uint64) int {
	return slices.IndexFunc(l.list, func(e like) bool { return e.post == post })
}

// liker is one entry of a liker chunk.
type liker struct {
	user uint64
	ts   int64
}

func decodeLikers(v []byte) ([]liker, error) {
	if len(v)%likerSize != 0 {
		return nil, fmt.Errorf("%w: liker chunk of %d bytes", ErrCorrupt, len(v))
	}
	out := make([]liker, len(v)/likerSize)
	for i := range out {
		out[i] = liker{user: u64at(v, i*likerSize), ts: int64(u64at(v, i*likerSize+8))}
	}
	return out, nil
}

func encodeLikers(ls []liker) []byte {
	slices.SortFunc(ls, likersNewestFirst)
	v := make([]byte, 0, len(ls)*likerSize)
	for _, e := range ls {
		v = binary.BigEndian.AppendUint64(v, e.user)
		v = binary.BigEndian.AppendUint64(v, uint64(e.ts))
	}
	return v
}

// chunkAt names the chunk of one post and second that a batch adds.
type chunkAt struct {
	post   uint64
	second int64
}

// Likes makes the likes and unlikes of one batch of partition p in a transaction: it
// keeps the like records it reads and the likers it adds until Flush writes them, once
// each. A Likes is not safe for concurrent use.
type Likes struct {
	heavy   *HeavyLikers
	p       int
	users   map[uint64]*likes
	added   map[chunkAt][]liker
	posts   []chunkAt       // the chunks of added in the order first added, for Flush
	merged  bool            // Flush merges into an existing chunk of the same batch
	writes  int             // keys Flush set or deleted
	touched map[string]bool // keys set or deleted before Flush
}

// Writes is how many keys the batch has set or deleted so far, each counted once.
func (l *Likes) Writes() int { return l.writes + len(l.touched) }

func (l *Likes) touch(keys ...key) {
	if l.touched == nil {
		l.touched = map[string]bool{}
	}
	for _, k := range keys {
		l.touched[string(k)] = true
	}
}

// NewLikes starts a batch of partition p. heavy, when not nil, is the partition's
// HeavyLikers, which the batch reads and adds to.
func NewLikes(p int, heavy *HeavyLikers) *Likes {
	return &Likes{p: p, heavy: heavy, users: map[uint64]*likes{}, added: map[chunkAt][]liker{}}
}

// HeavyLikers remembers users of one partition whose stored like record says heavy, so
// that their likes skip reading it: a user never stops being heavy, so what it holds
// stays true as long as the partition's state only moves forward (a restore from a
// backup needs a new one). It holds at most maxHeavyLikers users, forgetting them all
// when full. It is not safe for concurrent use.
type HeavyLikers struct{ users map[uint64]struct{} }

const maxHeavyLikers = 1 << 16

// NewHeavyLikers returns an empty HeavyLikers.
func NewHeavyLikers() *HeavyLikers { return &HeavyLikers{users: map[uint64]struct{}{}} }

// record is user u's like record: the batch's copy, or the stored one.
func (l *Likes) record(txn *badger.Txn, u uint64) (*likes, error) {
	if r, ok := l.users[u]; ok {
		return r, nil
	}
	r := &likes{}
	if l.heavy.has(u) {
		r.heavy = true
		l.users[u] = r
		return r, nil
	}
	item, err := txn.Get(likesKey(l.p, u))
	switch {
	case err == nil:
		if err := item.Value(func(v []byte) (err error) { r, err = decodeLikes(v); return err }); err != nil {
			return nil, err
		}
	case !errors.Is(err, badger.ErrKeyNotFound):
		return nil, err
	}
	if r.heavy {
		l.heavy.add(u) // read as committed (records are written at Flush): true for good
	}
	l.users[u] = r
	return r, nil
}

func (h *HeavyLikers) has(u uint64) bool {
	if h == nil {
		return false
	}
	_, ok := h.users[u]
	return ok
}

func (h *HeavyLikers) add(u uint64) {
	if h == nil {
		return
	}
	if len(h.users) >= maxHeavyLikers {
		clear(h.users)
	}
	h.users[u] = struct{}{}
}

// Like makes user u like post at time ts (milliseconds), placed at seq in the events
// stream, if u does not like it yet; it reports whether anything changed, and when not
// the place the like keeps (see RelateAt, whose rules it follows).
func (l *Likes) Like(txn *badger.Txn, u, post uint64, ts int64, seq uint64) (changed bool, at uint64, err error) {
	ts = max(ts, 0)
	r, err := l.record(txn, u)
	if err != nil {
		return false, 0, err
	}
	rel := Rel{A: u, B: post}
	switch i := r.find(post); {
	case r.heavy:
		if changed, at, err = l.relate(txn, rel, ts, seq); err != nil || !changed {
			return false, at, err
		}
	case i >= 0:
		e := &r.list[i]
		if seq != 0 && seq < e.seq {
			at, e.seq, r.dirty = e.seq, seq, true
			return false, at, nil
		}
		return false, e.seq, nil
	case len(r.list) == maxLightLikes: // turns heavy: its likes become relation keys
		for _, e := range r.list {
			if _, _, err := l.relate(txn, Rel{A: u, B: e.post}, e.ts, e.seq); err != nil {
				return false, 0, err
			}
		}
		if _, _, err := l.relate(txn, rel, ts, seq); err != nil {
			return false, 0, err
		}
		*r = likes{heavy: true, dirty: true}
	default:
		i := 0
		for i < len(r.list) && before(r.list[i].ts, r.list[i].post, ts, post) {
			i++
		}
		r.list, r.dirty = slices.Insert(r.list, i, like{post: post, ts: ts, seq: seq}), true
	}
	c := chunkAt{post: post, second: secondOf(ts)}
	if _, ok := l.added[c]; !ok {
		l.posts = append(l.posts, c)
	}
	l.added[c] = append(l.added[c], liker{user: u, ts: ts})
	return true, seq, nil
}

// relate is relateAt for a heavy user's like, counting its writes.
func (l *Likes) relate(txn *badger.Txn, r Rel, ts int64, seq uint64) (changed bool, at uint64, err error) {
	changed, at, err = relateAt(txn, l.p, Like, r, ts, seq)
	switch {
	case changed:
		l.touch(relKey(l.p, Like, r), subjectKey(l.p, Like, r, max(ts, 0)))
	case seq != 0 && seq < at:
		l.touch(relKey(l.p, Like, r)) // the relation takes the earlier place
	}
	return changed, at, err
}

// Unlike undoes user u's like of post if there is one; it reports whether anything
// changed and, if so, the time the like was made.
func (l *Likes) Unlike(txn *badger.Txn, u, post uint64) (changed bool, since int64, err error) {
	r, err := l.record(txn, u)
	if err != nil {
		return false, 0, err
	}
	if r.heavy {
		rel := Rel{A: u, B: post}
		if changed, since, err = unrelate(txn, l.p, Like, rel); err != nil || !changed {
			return false, 0, err
		}
		l.touch(relKey(l.p, Like, rel), subjectKey(l.p, Like, rel, since))
	} else {
		i := r.find(post)
		if i < 0 {
			return false, 0, nil
		}
		since = r.list[i].ts
		r.list, r.dirty = slices.Delete(r.list, i, i+1), true
	}
	return true, since, l.dropLiker(txn, u, post, since)
}

// dropLiker takes user u out of post's likers, from the batch's chunk or a stored one.
func (l *Likes) dropLiker(txn *badger.Txn, u, post uint64, ts int64) error {
	c := chunkAt{post: post, second: secondOf(ts)}
	if i := slices.Index(l.added[c], liker{user: u, ts: ts}); i >= 0 {
		l.added[c] = slices.Delete(l.added[c], i, i+1)
		return nil
	}
	prefix := likersSecond(l.p, post, c.second)
	var k, v []byte
	err := func() error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true})
		defer it.Close()
		for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
			val, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			for i := 0; i+likerSize <= len(val); i += likerSize {
				if u64at(val, i) == u && int64(u64at(val, i+8)) == ts {
					k, v = it.Item().KeyCopy(nil), slices.Delete(val, i, i+likerSize)
					return nil
				}
			}
		}
		return nil
	}()
	switch {
	case err != nil:
		return err
	case k == nil:
		return nil // not listed: nothing to take out
	}
	l.touch(k)
	if len(v) == 0 {
		return txn.Delete(k)
	}
	return txn.Set(k, v)
}

// Flush writes the batch's like records and liker chunks in txn, the chunks under
// batch, which must differ from every other batch's of the partition (the event stage
// uses its position after the transaction).
func (l *Likes) Flush(txn *badger.Txn, batch uint64) error {
	for u, r := range l.users {
		if !r.dirty {
			continue
		}
		k := likesKey(l.p, u)
		var err error
		if !r.heavy && len(r.list) == 0 {
			err = txn.Delete(k)
		} else {
			err = txn.Set(k, r.encode())
		}
		if err != nil {
			return err
		}
		r.dirty = false
		l.writes++
	}
	for _, c := range l.posts {
		ls := l.added[c]
		k := likersKey(l.p, c.post, c.second, batch)
		if l.merged {
			old, err := chunk(txn, k)
			if err != nil {
				return err
			}
			ls = append(old, ls...)
		}
		if len(ls) == 0 {
			continue
		}
		if err := txn.Set(k, encodeLikers(ls)); err != nil {
			return err
		}
		l.writes++
	}
	clear(l.added)
	l.posts = l.posts[:0]
	return nil
}

// chunk reads the liker chunk at k (none when there is none).
func chunk(txn *badger.Txn, k key) ([]liker, error) {
	item, err := txn.Get(k)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	var out []liker
	err = item.Value(func(v []byte) (err error) { out, err = decodeLikers(v); return err })
	return out, err
}

// relatedLikes is Related for likes: whether user a likes each of bs.
func relatedLikes(txn *badger.Txn, p int, a uint64, bs []uint64, out []bool) error {
	r, err := NewLikes(p, nil).record(txn, a)
	switch {
	case err != nil:
		return err
	case r.heavy:
		return relatedKeys(txn, p, Like, a, bs, out)
	}
	for i, b := range bs {
		out[i] = r.find(b) >= 0
	}
	return nil
}

// cursor is a list entry's place: ^time, other side, third part (0 for likes).
func cursor(ts int64, other uint64) []byte {
	return key{}.u64(math.MaxUint64 - uint64(ts)).u64(other).u64(0)
}

// after reports whether an entry at time ts with other side id comes after cursor c (nil:
// the start of the list).
func after(ts int64, id uint64, c []byte) bool {
	return c == nil || bytes.Compare(cursor(ts, id), c) > 0
}

// likedPage is List for a user's likes: from the like record, or the list keys of a
// heavy user (ok false).
func likedPage(txn *badger.Txn, p int, u uint64, limit int, from []byte) (items []Item, next string, ok bool, err error) {
	r, err := NewLikes(p, nil).record(txn, u)
	if err != nil || r.heavy {
		return nil, "", false, err
	}
	for _, e := range r.list {
		if !after(e.ts, e.post, from) {
			continue
		}
		if len(items) == limit {
			return items, items[limit-1].Cursor(), true, nil
		}
		items = append(items, Item{ID: e.post, TS: e.ts, cursor: cursor(e.ts, e.post)})
	}
	return items, "", true, nil
}

// likersPage is List for a post's likers kept in partition p: its chunks a second at a
// time, newest first, each second's merged.
func likersPage(txn *badger.Txn, p int, post uint64, limit int, from []byte) (items []Item, next string, err error) {
	prefix := relPrefix(nsLikers, p, Like).u64(post)
	start := prefix
	if from != nil {
		start = likersSecond(p, post, secondOf(int64(math.MaxUint64-u64at(from, 0))))
	}
	it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true})
	defer it.Close()
	var second []liker // the likers of the second being read
	flush := func() bool {
		slices.SortFunc(second, likersNewestFirst)
		for _, e := range second {
			if !after(e.ts, e.user, from) {
				continue
			}
			if len(items) == limit {
				next = items[limit-1].Cursor()
				return false
			}
			items = append(items, Item{ID: e.user, TS: e.ts, cursor: cursor(e.ts, e.user)})
		}
		second = second[:0]
		return true
	}
	var at []byte // the current second's key prefix
	for it.Seek(start); it.ValidForPrefix(prefix); it.Next() {
		kb := it.Item().Key()
		if len(kb) != chunkLen {
			return nil, "", fmt.Errorf("%w: liker chunk key of %d bytes", ErrCorrupt, len(kb))
		}
		if at != nil && !bytes.Equal(at, kb[:chunkLen-8]) && !flush() {
			return items, next, nil
		}
		at = append(at[:0], kb[:chunkLen-8]...)
		err := it.Item().Value(func(v []byte) error {
			ls, err := decodeLikers(v)
			second = append(second, ls...)
			return err
		})
		if err != nil {
			return nil, "", err
		}
	}
	flush()
	return items, next, nil
}

// countLikers counts post's likers kept in partition p, reading its chunks.
func countLikers(txn *badger.Txn, p int, post uint64) (uint64, error) {
	prefix := relPrefix(nsLikers, p, Like).u64(post)
	it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true})
	defer it.Close()
	var n uint64
	for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
		err := it.Item().Value(func(v []byte) error { n += uint64(len(v)) / likerSize; return nil })
		if err != nil {
			return 0, err
		}
	}
	return n, nil
}
