package graph

import (
	"bytes"
	"fmt"
	"hash/maphash"
	"math"
	"slices"

	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/internal/arena"
	"github.com/tally-dev/tally/store/internal/keys"
	"github.com/tally-dev/tally/store/rel"
)

// Likes are kept so that most cost one write, where a follow costs three (its relation
// and a list key on each side):
//
//   - A user's likes, in the user's partition p, are one like record L|p|r|u: the state
//     (rel.State: made or undone, by place) of each post the user liked or unliked, while
//     there are at most maxLightLikes; those made are kept newest first, then the undone
//     ones (tombstones: a like placed before its unlike, handed over late, must find it).
//     A like rewrites it: one write, whose Get also answers liked and likes.user. Past
//     that the user is heavy: the record says so, and each post's state is a relation key
//     R|p|l|u|post, with a list key S|p|l|u|^time|post|0 while the like is made, as a
//     follow's subject side is. Heavy users stay heavy.
//   - A post's likers, in the likers' partition p, are liker chunks
//     K|p|l|post|^second|batch: the likers of one post in one second of like time that
//     one batch (an event-stage transaction) added, newest first, user and time, 16
//     bytes each. A batch writes one chunk per post and second it liked, however many
//     likes that post had in it: a popular post costs a fraction of a write per like.
//     An unlike, or a like whose place moves, rewrites the chunk that holds it.
//
// Lists order as every relation list does: newest first, then by the other side's id;
// a cursor is the same 24 bytes (^time, other side, 0) in every partition and shape.

// chunkAt names the chunk of one post and second that a batch adds.
type chunkAt struct {
	post   uint64
	second int64
}

// Likes makes the likes and unlikes of one batch of partition p in a transaction: it
// keeps the like records it reads and the likers it adds until Flush writes them, once
// each. A Likes is not safe for concurrent use.
type Likes struct {
	res    records
	p      int
	users  map[uint64]*likes
	order  []userRecord // users' records in the order first read: what Flush and Resident.Keep go through
	added  map[chunkAt][]liker
	posts  []chunkAt // the chunks of added in the order first added, for Flush
	merged bool      // Flush merges into an existing chunk of the same batch
	writes int       // keys Flush set or deleted
	// pending and pendingKeys are what Flush will write, as Badger measures a
	// transaction (see Pending).
	pending, pendingKeys int
	touched              map[uint64]struct{} // keys set or deleted before Flush, by their hash (a count)
	seed                 maphash.Seed

	// db, when set, is where stored liker chunks are looked for (see ReadChunksFrom),
	// through view, as committed. rewrote holds the stored chunks the batch took likers
	// out of, as they are now (empty: to delete), read over what is stored and written
	// by Flush once each: a popular post's chunk that many late likes move out of was
	// written again for each, and each write counts whole against the transaction's
	// bound, so that one hop batch could outgrow a transaction alone and be dead-lettered.
	db      *cold.DB
	view    *cold.Txn
	rewrote map[string][]byte

	get    key         // the key of a record being read: Badger copies it, so one buffer serves
	buf    arena.Arena // the keys and values Flush sets, which Badger holds until the commit
	likers []liker     // the block the chunks of added take their first room from (likerRoom)
}

// ReadChunksFrom makes the batch look for the stored liker chunk an unlike or a moved
// like takes its liker out of in db as committed, with what the batch rewrote on top,
// rather than through the batch's transaction: Badger sorts everything a transaction
// has written each time it makes an iterator of it, which cost a long batch of late
// likes a sort of its writes per like (22 % of all CPU draining batches not split by
// partition). Only the partition's batch writes its chunks, so what is committed is
// what the transaction would read. Close ends the view.
func (l *Likes) ReadChunksFrom(db *cold.DB) { l.db = db }

// Close discards what the batch opened to read (see ReadChunksFrom).
func (l *Likes) Close() {
	if l.view != nil {
		l.view.Discard()
		l.view = nil
	}
}

// Pending is what Flush would write now: bytes as Badger counts them against a
// transaction's bound (key, value and 14 bytes of version and metadata each), and keys.
// A stage stops taking messages while what it has written and what is pending still
// leave room (see cold.Txn.FillWith).
func (l *Likes) Pending() (bytes, keys int) { return l.pending, l.pendingKeys }

// dirtied counts in Pending what record r adds after a change: was is its size before,
// when it was dirty already, else -1.
func (l *Likes) dirtied(r *likes, was int) {
	if was < 0 {
		l.pending += likesKeyLen + 14
		l.pendingKeys++
		was = 0
	}
	l.pending += r.size() - was
}

// Writes is how many keys the batch has set or deleted so far, each counted once.
func (l *Likes) Writes() int { return l.writes + len(l.touched) }

// touch counts keys as written. Only their number is wanted (Writes), so they are kept
// by a 64-bit hash rather than copied into strings: two keys of a batch hashing alike,
// one in 2^64 a pair, would count once.
func (l *Likes) touch(keys ...key) {
	if l.touched == nil {
		l.touched, l.seed = map[uint64]struct{}{}, maphash.MakeSeed()
	}
	for _, k := range keys {
		l.touched[maphash.Bytes(l.seed, k)] = struct{}{}
	}
}

// records are the like records kept in RAM: a Resident's.
type records interface {
	record(u uint64) (*likes, bool)
	maxStates() int // the most states of a heavy user worth reading in
}

// userRecord is a user's like record, as the batch holds it.
type userRecord struct {
	u uint64
	r *likes
}

// NewLikes starts a batch of partition p, which reads like records through res (a
// *Resident, or nil): Resident.Keep takes in what the batch read and wrote once it
// commits.
func NewLikes(p int, res records) *Likes {
	return &Likes{p: p, res: res, users: map[uint64]*likes{}, added: map[chunkAt][]liker{}}
}

// Reset makes l a new batch of its partition, reading through res, keeping what it
// allocated (its maps' room) but nothing it held: an event stage reuses one Likes for
// every transaction rather than growing new maps each time. The records of the batch
// before must have been handed over (Resident.Keep) or dropped with it.
func (l *Likes) Reset(res records) {
	l.Close()
	l.res = res
	clear(l.users)
	clear(l.order) // the records are the Resident's now, or dropped
	l.order = l.order[:0]
	clear(l.added)
	clear(l.touched)
	l.posts, l.merged, l.writes, l.db, l.rewrote = l.posts[:0], false, 0, nil, nil
	l.likers = l.likers[:0]
	l.pending, l.pendingKeys = 0, 0
	l.buf = arena.Arena{}
}

// record is user u's like record: the batch's copy, the resident one or the stored one.
func (l *Likes) record(txn *cold.Txn, u uint64) (*likes, error) {
	if r, ok := l.users[u]; ok {
		return r, nil
	}
	if l.res != nil {
		if r, ok := l.res.record(u); ok {
			if r.heavy && r.states == nil && !r.tooMany {
				if err := l.readStates(txn, u, r, l.res.maxStates()); err != nil {
					return nil, err
				}
			}
			l.hold(u, r)
			return r, nil
		}
	}
	var r *likes
	l.get = likesKeyTo(l.get[:0], l.p, u)
	if _, err := txn.Get(l.get, func(v []byte) (err error) { r, err = decodeLikes(v); return err }); err != nil {
		return nil, err
	}
	if r == nil {
		r = newRecord()
	}
	l.hold(u, r)
	return r, nil
}

// hold makes r user u's record in the batch (Resident.Keep takes it in once the
// transaction commits).
func (l *Likes) hold(u uint64, r *likes) {
	l.users[u] = r
	l.order = append(l.order, userRecord{u, r})
}

// newRecord is the like record of a user never seen, with room for its first like in
// the same allocation: most such users like once.
func newRecord() *likes {
	n := new(struct {
		r     likes
		first [1]like
	})
	n.r.list = n.first[:0]
	return &n.r
}

// Toggle applies a like (on) or an unlike of post by user u, placed at e.Place, and
// returns the like's state before and after it (see rel.State.Apply): a like placed
// before an unlike already applied is undone by it, however late it comes, and a like
// made twice is made by the copy placed first. forgot is rel's: an older like was
// forgotten.
func (l *Likes) Toggle(txn *cold.Txn, u, post uint64, on bool, e rel.Event) (before, after rel.State, forgot bool, err error) {
	e.TS = max(e.TS, 0)
	r, err := l.record(txn, u)
	if err != nil {
		return before, after, false, err
	}
	if r.heavy {
		return l.toggleKey(txn, r, u, post, on, e)
	}
	i := r.find(post)
	was := -1
	if r.dirty {
		was = r.size()
	}
	if i < 0 && len(r.list) == maxLightLikes { // turns heavy: its states become relation keys
		list := r.list
		// It had no relation key before: the states it writes now are all it has.
		*r = likes{heavy: true, dirty: true, states: map[uint64]rel.State{}}
		l.dirtied(r, was)
		for _, x := range list {
			if err := l.putKey(txn, r, Rel{A: u, B: x.post}, rel.State{}, x.State); err != nil {
				return before, after, false, err
			}
		}
		return l.toggleKey(txn, r, u, post, on, e)
	}
	var st rel.State
	if i >= 0 {
		before = r.list[i].Clone()
		st = before.Clone()
	}
	_, forgot = st.Apply(on, e)
	if st.Equal(before) {
		return before, st, forgot, nil
	}
	if i < 0 {
		r.list = append(r.list, like{post: post})
		i = len(r.list) - 1
	}
	r.list[i].State, r.dirty = st, true
	l.dirtied(r, was)
	r.place(i)
	return before, st, forgot, l.moveLiker(txn, u, post, before, st)
}

// toggleKey is Toggle for heavy user u, whose record is r: the post's state is a
// relation key.
func (l *Likes) toggleKey(txn *cold.Txn, r *likes, u, post uint64, on bool, e rel.Event) (before, after rel.State, forgot bool, err error) {
	if before, err = l.heavyState(txn, r, u, post); err != nil {
		return before, after, false, err
	}
	after = before.Clone()
	_, forgot = after.Apply(on, e)
	if after.Equal(before) {
		return before, after, forgot, nil
	}
	if err := l.putKey(txn, r, Rel{A: u, B: post}, before, after); err != nil {
		return before, after, forgot, err
	}
	return before, after, forgot, l.moveLiker(txn, u, post, before, after)
}

// putKey writes heavy user rel.A's like state (its record is rec), moving its list key
// with its time.
func (l *Likes) putKey(txn *cold.Txn, rec *likes, r Rel, before, after rel.State) error {
	w, err := putState(txn, &l.buf, l.p, Like, r, before, after)
	l.touch(w.keys[:w.n]...)
	if err == nil {
		rec.wroteState(r.B, after)
	}
	return err
}

// moveLiker moves user u in post's likers from where before had it to where after has.
func (l *Likes) moveLiker(txn *cold.Txn, u, post uint64, before, after rel.State) error {
	if before.On == after.On && before.Made.TS == after.Made.TS {
		return nil
	}
	if before.On {
		if err := l.dropLiker(txn, u, post, before.Made.TS); err != nil {
			return err
		}
	}
	if after.On {
		c := chunkAt{post: post, second: secondOf(after.Made.TS)}
		ls, ok := l.added[c]
		if !ok {
			l.posts = append(l.posts, c)
			l.pending += chunkLen + 14
			l.pendingKeys++
			ls = l.likerRoom()
		}
		l.added[c] = append(ls, liker{user: u, ts: after.Made.TS})
		l.pending += likerSize
	}
	return nil
}

// likerRoom is room for a chunk's first two likers, from blocks the batch reuses once
// Flush has written its chunks: most chunks (a post's likers of one second and batch)
// have one or two, and one that has more grows a slice of its own.
func (l *Likes) likerRoom() []liker {
	const room, block = 2, 1024
	if len(l.likers)+room > cap(l.likers) {
		l.likers = make([]liker, 0, block)
	}
	n := len(l.likers)
	l.likers = l.likers[:n+room]
	return l.likers[n : n : n+room]
}

// dropLiker takes user u out of post's likers, from the batch's chunk or a stored one.
func (l *Likes) dropLiker(txn *cold.Txn, u, post uint64, ts int64) error {
	c := chunkAt{post: post, second: secondOf(ts)}
	if i := slices.Index(l.added[c], liker{user: u, ts: ts}); i >= 0 {
		l.added[c] = slices.Delete(l.added[c], i, i+1)
		return nil
	}
	k, v, err := l.findLiker(txn, likersSecond(l.p, post, c.second), liker{user: u, ts: ts})
	switch {
	case err != nil:
		return err
	case k == nil:
		return nil // not listed: nothing to take out
	}
	l.touch(k)
	if l.rewrote == nil {
		l.rewrote = map[string][]byte{}
	}
	old, had := l.rewrote[string(k)]
	if !had {
		l.pending += len(k) + 14
		l.pendingKeys++
	}
	l.pending += len(v) - len(old)
	l.rewrote[string(k)] = v
	return nil
}

// findLiker finds the stored chunk under prefix that lists e, and returns its key and
// its value without e (nil, nil when none does).
func (l *Likes) findLiker(txn *cold.Txn, prefix key, e liker) (k, v []byte, err error) {
	from := txn
	if l.db != nil {
		if l.view == nil {
			l.view = l.db.NewTxn(false)
		}
		from = l.view
	}
	it := from.Iterator(cold.IteratorOptions{Prefix: prefix})
	defer it.Close()
	for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
		val, ok := l.rewrote[string(it.Key())]
		if !ok {
			if val, err = it.ValueCopy(nil); err != nil {
				return nil, nil, err
			}
		}
		for i := 0; i+likerSize <= len(val); i += likerSize {
			if u64at(val, i) == e.user && int64(u64at(val, i+8)) == e.ts {
				// val is the batch's own: a copy, or what it rewrote before.
				return it.KeyCopy(nil), slices.Delete(val, i, i+likerSize), nil
			}
		}
	}
	return nil, nil, nil
}

// Flush writes the batch's like records and liker chunks in txn, the chunks under
// batch, which must differ from every other batch's of the partition (the event stage
// uses its position after the transaction), and the stored chunks its unlikes and moved
// likes took likers out of, each once however many it took.
func (l *Likes) Flush(txn *cold.Txn, batch uint64) error {
	for k, v := range l.rewrote {
		var err error
		if len(v) == 0 {
			err = txn.Delete([]byte(k))
		} else {
			err = txn.Set([]byte(k), v)
		}
		if err != nil {
			return err
		}
	}

	for _, ur := range l.order {
		u, r := ur.u, ur.r
		if !r.dirty {
			continue
		}
		k := likesKeyTo(l.buf.Alloc(likesKeyLen), l.p, u)
		if err := txn.Set(k, r.appendTo(l.buf.Alloc(r.size()))); err != nil {
			return err
		}
		r.dirty = false
		l.writes++
	}
	for _, c := range l.posts {
		ls := l.added[c]
		k := likersKeyTo(l.buf.Alloc(chunkLen), l.p, c.post, c.second, batch)
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
		if err := txn.Set(k, appendLikers(l.buf.Alloc(len(ls)*likerSize), ls)); err != nil {
			return err
		}
		l.writes++
	}
	clear(l.added)
	l.posts, l.pending, l.pendingKeys = l.posts[:0], 0, 0
	l.likers = l.likers[:0] // what added held is written
	return nil
}

// chunk reads the liker chunk at k (none when there is none).
func chunk(txn *cold.Txn, k key) ([]liker, error) {
	var out []liker
	_, err := txn.Get(k, func(v []byte) (err error) { out, err = decodeLikers(v); return err })
	return out, err
}

// relatedLikes is Related for likes: whether user a likes each of bs.
func relatedLikes(txn *cold.Txn, p int, a uint64, bs []uint64, out []bool) error {
	r, err := NewLikes(p, nil).record(txn, a)
	switch {
	case err != nil:
		return err
	case r.heavy:
		return relatedKeys(txn, p, Like, a, bs, out)
	}
	for i, b := range bs {
		j := r.find(b)
		out[i] = j >= 0 && r.list[j].On
	}
	return nil
}

// cursor is a list entry's place: ^time, other side, third part (0 for likes).
func cursor(ts int64, other uint64) []byte {
	return key{}.U64(math.MaxUint64 - uint64(ts)).U64(other).U64(0)
}

// after reports whether an entry at time ts with other side id comes after cursor c (nil:
// the start of the list).
func after(ts int64, id uint64, c []byte) bool {
	return c == nil || bytes.Compare(cursor(ts, id), c) > 0
}

// likedPage is List for a user's likes: from the like record, or the list keys of a
// heavy user (ok false).
func likedPage(txn *cold.Txn, p int, u uint64, limit int, from []byte) (items []Item, next string, ok bool, err error) {
	r, err := NewLikes(p, nil).record(txn, u)
	if err != nil || r.heavy {
		return nil, "", false, err
	}
	for _, e := range r.list {
		if !e.On {
			break // the undone ones come last
		}
		if !after(e.Made.TS, e.post, from) {
			continue
		}
		if len(items) == limit {
			return items, items[limit-1].Cursor(), true, nil
		}
		items = append(items, Item{ID: e.post, TS: e.Made.TS, cursor: cursor(e.Made.TS, e.post)})
	}
	return items, "", true, nil
}

// likersPage is List for a post's likers kept in partition p: its chunks a second at a
// time, newest first, each second's merged.
func likersPage(txn *cold.Txn, p int, post uint64, limit int, from []byte) (items []Item, next string, err error) {
	prefix := relPrefix(keys.NSLikers, p, Like).U64(post)
	start := prefix
	if from != nil {
		start = likersSecond(p, post, secondOf(int64(math.MaxUint64-u64at(from, 0))))
	}
	it := txn.Iterator(cold.IteratorOptions{Prefix: prefix, PrefetchValues: true})
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
		kb := it.Key()
		if len(kb) != chunkLen {
			return nil, "", fmt.Errorf("%w: liker chunk key of %d bytes", cold.ErrCorrupt, len(kb))
		}
		if at != nil && !bytes.Equal(at, kb[:chunkLen-8]) && !flush() {
			return items, next, nil
		}
		at = append(at[:0], kb[:chunkLen-8]...)
		err := it.Value(func(v []byte) error {
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
func countLikers(txn *cold.Txn, p int, post uint64) (uint64, error) {
	prefix := relPrefix(keys.NSLikers, p, Like).U64(post)
	it := txn.Iterator(cold.IteratorOptions{Prefix: prefix, PrefetchValues: true})
	defer it.Close()
	var n uint64
	for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
		err := it.Value(func(v []byte) error { n += uint64(len(v)) / likerSize; return nil })
		if err != nil {
			return 0, err
		}
	}
	return n, nil
}
