package viewers

import (
	"fmt"

	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/internal/keys"
	"github.com/tally-dev/tally/store/sketch"
)

func postPrefix(p int, post uint64) keys.Key {
	return keys.New(keys.NSViewers, 12).U16(p).U64(post)
}

// post is one post's sketch as a transaction has it: a copy, and the pieces it changed.
type post struct {
	s      sketch.Sketch
	before uint64    // the count when the transaction read it
	pieces [2]uint64 // a bit per piece to write again
	all    bool      // every piece (the sketch took its next form)
}

// Viewers reads and changes the sketches of partition p's posts in one transaction: from
// what the transaction changed, the Cache, or the database. A Viewers is not safe for
// concurrent use.
type Viewers struct {
	p     int
	cache *Cache
	posts map[uint64]*post
	order []uint64 // the posts in the order the transaction first read them
}

// New starts a transaction's viewers of partition p, read through cache (which may be
// nil).
func New(p int, cache *Cache) *Viewers {
	return &Viewers{p: p, cache: cache, posts: map[uint64]*post{}}
}

// Add counts user u among the viewers of post p.
func (v *Viewers) Add(txn *cold.Txn, p, u uint64) error {
	ps, err := v.get(txn, p)
	if err != nil {
		return err
	}
	switch c := ps.s.Add(u); c {
	case sketch.Unchanged:
	case sketch.Reshaped:
		ps.all = true
	default:
		ps.pieces[c/64] |= 1 << (c % 64)
	}
	return nil
}

func (v *Viewers) get(txn *cold.Txn, p uint64) (*post, error) {
	if ps, ok := v.posts[p]; ok {
		return ps, nil
	}
	ps := &post{}
	if s, ok := v.cache.get(p); ok {
		ps.s = s.Clone()
	} else if err := load(txn, v.p, p, &ps.s); err != nil {
		return nil, err
	}
	ps.before, _ = ps.s.Count()
	v.posts[p] = ps
	v.order = append(v.order, p)
	return ps, nil
}

// load reads post p's sketch from txn into s.
func load(txn *cold.Txn, part int, p uint64, s *sketch.Sketch) error {
	prefix := postPrefix(part, p)
	err := txn.Scan(prefix, nil, true, func(k, val []byte) (bool, error) {
		if len(k) != len(prefix)+1 {
			return false, fmt.Errorf("%w: viewers key of %d bytes", ErrCorrupt, len(k))
		}
		return true, s.LoadChunk(int(k[len(prefix)]), val)
	})
	if err != nil {
		return fmt.Errorf("cannot read the viewers of post %d: %w", p, err)
	}
	return nil
}

// Counts calls fn, in the order the transaction first read them, with each post whose
// count of viewers the transaction changed and that count.
func (v *Viewers) Counts(fn func(p, n uint64)) {
	for _, p := range v.order {
		ps := v.posts[p]
		if n, _ := ps.s.Count(); n != ps.before {
			fn(p, n)
		}
	}
}

// Flush stores the pieces the transaction changed in txn: one key each, a piece of at
// most sketch.MaxChunk bytes, so what a transaction writes grows with the views it
// applies, never with the size of a sketch.
func (v *Viewers) Flush(txn *cold.Txn) error {
	// The transaction keeps every value until it commits: each piece has its own bytes
	// in vals, which only grows (a larger one leaves the earlier pieces where they are).
	var vals []byte
	for _, p := range v.order {
		ps := v.posts[p]
		for c := range sketch.Chunks {
			if !ps.all && ps.pieces[c/64]&(1<<(c%64)) == 0 {
				continue
			}
			start := len(vals)
			vals = ps.s.AppendChunk(vals, c)
			if len(vals) == start {
				continue // an empty piece stays empty: a sketch only grows
			}
			if err := txn.Set(postPrefix(v.p, p).U8(byte(c)), vals[start:len(vals):len(vals)]); err != nil {
				return err
			}
		}
		ps.pieces, ps.all = [2]uint64{}, false
	}
	return nil
}

// Count reads the count of post p's viewers in txn, and whether it is exact.
func Count(txn *cold.Txn, part int, p uint64) (n uint64, exact bool, err error) {
	var s sketch.Sketch
	if err := load(txn, part, p, &s); err != nil {
		return 0, false, err
	}
	n, exact = s.Count()
	return n, exact, nil
}
