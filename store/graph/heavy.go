package graph

import (
	"fmt"
	"unsafe"

	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/internal/keys"
	"github.com/tally-dev/tally/store/rel"
)

// A heavy user's like states are relation keys, one a post (see likes.go), and each of
// its likes read its post's key before it wrote it: a Badger read for every like, most
// of them of a key that is not there (a post liked for the first time). A Resident keeps
// the states of the heavy users it holds, all of them (likes.states), so that a like of
// such a user reads nothing: a post the states do not name has none stored.
//
// Their being all of them is what makes an absent post safe to take for one without a
// state, and it holds because only the partition's event stage writes these keys, and
// only through Likes (Toggle's putState): a user turning heavy starts with the states it
// writes from its record; a heavy user found resident without them has them read in
// once (readStates); a transaction adds what it writes to its own over, which Keep
// merges in after the commit, never before.

// maxHeavyStates is the most states of one user a Resident reads in; a user with more
// is read from Badger a like at a time, as before. So is a user whose states would take
// more than an eighth of the Resident's budget: read in, they would push the other
// users out, and be forgotten and read in again and again.
const maxHeavyStates = 1 << 16

func (r *Resident[R]) maxStates() int { return min(maxHeavyStates, r.max/8/stateCost(rel.State{})) }

// stateCost is what one kept state costs, for the budget: its map slot (post and
// state) twice over, since a Go map's slots are between 7/16 and 7/8 full, and the later
// events it keeps.
func stateCost(st rel.State) int {
	return 2*int(unsafe.Sizeof(uint64(0))+unsafe.Sizeof(st)) + len(st.Later)*laterCost
}

// heavyState is heavy user u's state of post: from the transaction's writes or the
// resident states when they are known, else from Badger.
func (l *Likes) heavyState(txn *cold.Txn, r *likes, u, post uint64) (rel.State, error) {
	if r.states == nil {
		l.get = relKeyTo(l.get[:0], l.p, Like, Rel{A: u, B: post})
		return getState(txn, l.get)
	}
	if st, ok := r.over[post]; ok {
		return st.Clone(), nil
	}
	return r.states[post].Clone(), nil // absent: no state stored
}

// wroteState notes the state the transaction wrote for post, when r's are known.
func (r *likes) wroteState(post uint64, st rel.State) {
	if r.states == nil {
		return
	}
	if r.over == nil {
		r.over = map[uint64]rel.State{}
	}
	r.over[post] = st
}

// readStates reads resident heavy user u's states in from the transaction (its own
// writes included), unless there are more than most.
func (l *Likes) readStates(txn *cold.Txn, u uint64, r *likes, most int) error {
	prefix := relPrefix(keys.NSRelation, l.p, Like).U64(u)
	states, cost := map[uint64]rel.State{}, 0
	it := txn.Iterator(cold.IteratorOptions{Prefix: prefix, PrefetchValues: true})
	defer it.Close()
	for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
		if len(states) == most {
			r.tooMany = true
			return nil
		}
		k := it.Key()
		if len(k) != relLen {
			return fmt.Errorf("%w: relation key %x", cold.ErrCorrupt, k)
		}
		err := it.Value(func(v []byte) (err error) {
			st, err := rel.Unmarshal(v)
			if err != nil {
				return fmt.Errorf("%w: relation %x: %w", cold.ErrCorrupt, k, err)
			}
			states[u64at(k, relOff+8)] = st
			cost += stateCost(st)
			return nil
		})
		if err != nil {
			return err
		}
	}
	r.states, r.statesCost = states, cost
	return nil
}

// mergeOver takes a committed transaction's writes into r's states.
func (r *likes) mergeOver() {
	for post, st := range r.over {
		if old, ok := r.states[post]; ok {
			r.statesCost -= stateCost(old)
		}
		r.states[post] = st
		r.statesCost += stateCost(st)
	}
	r.over = nil
}
