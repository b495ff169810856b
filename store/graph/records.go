package graph

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/internal/keys"
	"github.com/tally-dev/tally/store/rel"
)

// The shapes of like records and liker chunks (see likes.go): their keys, order and
// encoding.

// recordKind is the kind byte of a like record's key. Records of the layout before
// states (L|p|'l'|u: post, time and place per like) are moved by moveLikeStates.
const recordKind = 'r'

// maxLightLikes is the most posts a like record holds before its user turns heavy.
const maxLightLikes = 32

const (
	likerSize = 16          // user, time
	chunkLen  = relOff + 24 // post, ^second, batch
	// recordVersion starts a like record; recordHeavy is its flag for a heavy user.
	recordVersion = 2
	recordHeavy   = 1
)

// like is one post's state in a like record.
type like struct {
	post uint64
	rel.State
}

// likes is one user's like record: a light user's like states.
type likes struct {
	heavy bool
	list  []like // made ones newest first, then undone ones
	dirty bool   // changed by the batch: written at Flush

	// A heavy user's states, when a Resident keeps them (see heavy.go): every state
	// stored in the user's relation keys, so that a post absent from it has none and
	// costs no Badger read; nil while not known. A transaction never changes it (it is
	// the Resident's): what it writes goes to over, which Resident.Keep merges in once
	// it has committed. statesCost is their cost for the budget, and tooMany marks a
	// user with more states than a Resident reads in (Resident.maxStates).
	states     map[uint64]rel.State
	over       map[uint64]rel.State
	statesCost int
	tooMany    bool
}

func likesKey(p int, u uint64) key { return likesKeyTo(make(key, 0, likesKeyLen), p, u) }

// likesKeyLen is the length of a like record's key.
const likesKeyLen = relOff + 8

// likesKeyTo appends the key of u's like record in partition p to b.
func likesKeyTo(b key, p int, u uint64) key {
	return append(b, keys.NSLikes).U16(p).U8(recordKind).U64(u)
}

// likersKey is a chunk's key; second is the like time's second (time in milliseconds).
func likersKey(p int, post uint64, second int64, batch uint64) key {
	return likersSecond(p, post, second).U64(batch)
}

func likersSecond(p int, post uint64, second int64) key {
	return relPrefix(keys.NSLikers, p, Like).U64(post).U64(math.MaxUint64 - uint64(second))
}

// likersKeyTo appends likersKey(p, post, second, batch) to b.
func likersKeyTo(b key, p int, post uint64, second int64, batch uint64) key {
	return append(b, keys.NSLikers).U16(p).U8(byte(Like)).U64(post).U64(math.MaxUint64 - uint64(second)).U64(batch)
}

func secondOf(ts int64) int64 { return ts / 1000 }

// newestFirst orders likes and likers as lists are: newest first (like time ts), then
// by the other side's id.
func newestFirst(ts int64, id uint64, t int64, o uint64) int {
	return cmp.Or(cmp.Compare(t, ts), cmp.Compare(id, o))
}

func likersNewestFirst(a, b liker) int { return newestFirst(a.ts, a.user, b.ts, b.user) }

// recordOrder orders a like record: made likes newest first, then undone ones by post.
func recordOrder(a, b like) int {
	switch {
	case a.On && b.On:
		return newestFirst(a.Made.TS, a.post, b.Made.TS, b.post)
	case a.On != b.On:
		if a.On {
			return -1
		}
		return 1
	}
	return cmp.Compare(a.post, b.post)
}

func decodeLikes(v []byte) (*likes, error) {
	if len(v) < 2 || v[0] != recordVersion || v[1]&^recordHeavy != 0 {
		return nil, fmt.Errorf("%w: like record %x", cold.ErrCorrupt, v[:min(len(v), 2)])
	}
	l := &likes{heavy: v[1]&recordHeavy != 0}
	for b := v[2:]; len(b) > 0; {
		if len(b) < 8 || len(l.list) == maxLightLikes {
			return nil, fmt.Errorf("%w: like record of %d bytes", cold.ErrCorrupt, len(v))
		}
		st, n, err := rel.Decode(b[8:])
		if err != nil {
			return nil, fmt.Errorf("%w: like record: %w", cold.ErrCorrupt, err)
		}
		l.list = append(l.list, like{post: u64at(b, 0), State: st})
		b = b[8+n:]
	}
	return l, nil
}

func (l *likes) encode() []byte { return l.appendTo(make([]byte, 0, l.size())) }

// size is about what the record's encoding takes: room enough for most.
func (l *likes) size() int { return 2 + len(l.list)*24 }

// appendTo appends the record's encoding to v.
func (l *likes) appendTo(v []byte) []byte {
	v = append(v, recordVersion, 0)
	if l.heavy {
		v[len(v)-1] = recordHeavy
		return v
	}
	for i := range l.list {
		v = binary.BigEndian.AppendUint64(v, l.list[i].post)
		v = l.list[i].Append(v)
	}
	return v
}

// place moves the like at i, the one just changed or added, to where recordOrder puts
// it. Every record is kept in that order, so the others are in it already and the list
// ends as a sort would leave it, at the cost of the steps the like moves.
func (l *likes) place(i int) {
	x := l.list[i]
	for ; i > 0 && recordOrder(x, l.list[i-1]) < 0; i-- {
		l.list[i] = l.list[i-1]
	}
	for ; i < len(l.list)-1 && recordOrder(x, l.list[i+1]) > 0; i++ {
		l.list[i] = l.list[i+1]
	}
	l.list[i] = x
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
		return nil, fmt.Errorf("%w: liker chunk of %d bytes", cold.ErrCorrupt, len(v))
	}
	out := make([]liker, len(v)/likerSize)
	for i := range out {
		out[i] = liker{user: u64at(v, i*likerSize), ts: int64(u64at(v, i*likerSize+8))}
	}
	return out, nil
}

func encodeLikers(ls []liker) []byte { return appendLikers(make([]byte, 0, len(ls)*likerSize), ls) }

// appendLikers sorts ls as a chunk lists them and appends their encoding to v.
func appendLikers(v []byte, ls []liker) []byte {
	slices.SortFunc(ls, likersNewestFirst)
	for _, e := range ls {
		v = binary.BigEndian.AppendUint64(v, e.user)
		v = binary.BigEndian.AppendUint64(v, uint64(e.ts))
	}
	return v
}
