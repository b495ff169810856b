package graph

import (
	"slices"
)

// Resident is what an event partition's events read of its state, kept in RAM for the
// users active lately so that a like or a notification costs no Badger read: reader
// states (R, store/unread's) and like records (a heavy user's with all its states: see
// heavy.go), within one budget. It is written through: a transaction reads it through
// unread.Readers and Likes, which keep what the transaction read and wrote, and Keep
// takes that in only once the transaction has committed — so it never holds what
// Badger does not. Only the partition's event stage writes these keys; a stage that
// loads its state afresh (a restart, a restore, a takeover) starts a new Resident. Past
// its budget it forgets users at random (a map's order), an eighth at a time. A
// Resident is not safe for concurrent use.
type Resident[R Reader] struct {
	max, size int
	readers   map[uint64]R
	likes     map[uint64]*likes
	Hits      int64 // reads answered from RAM
	Misses    int64 // reads that went to Badger
	// door is TinyLFU's doorkeeper: a user becomes resident the second time a committed
	// transaction brings it within one generation of the bits (they are cleared once half
	// are set), so that users seen once — most likers of a large audience — cost a bit,
	// not an entry that pushes a returning one out.
	door    [doorWords]uint64
	doorSet int
}

const (
	doorBits  = 18 // 256 Ki bits, 32 KiB a partition
	doorWords = 1 << doorBits / 64
)

// Reader is a reader state as a Resident keeps it: a value (a transaction changes a
// copy) that knows what it costs in RAM, for the budget.
type Reader interface{ Cost() int }

// What a resident like record costs, for the budget: map entry, key and value as Go
// holds them.
const (
	likesCost = 8 + 8 + 48 + 40      // uid, pointer, record header, map entry
	likeCost  = 8 + 24 + 24 + 24 + 8 // post, made, later header, off, on
	laterCost = 24                   // one kept later event
)

// NewResident keeps up to maxBytes of state in RAM (none when maxBytes is 0).
func NewResident[R Reader](maxBytes int) *Resident[R] {
	return &Resident[R]{max: maxBytes, readers: map[uint64]R{}, likes: map[uint64]*likes{}}
}

// minResident is the smallest budget that keeps anything: one reader state and one like
// record.
func (r *Resident[R]) minResident() int {
	var zero R
	return zero.Cost() + likesCost
}

// Bytes is what the resident state costs now, by the budget's measure.
func (r *Resident[R]) Bytes() int {
	if r == nil {
		return 0
	}
	return r.size
}

func recordCost(l *likes) int {
	n := likesCost + len(l.list)*likeCost + l.statesCost
	for i := range l.list {
		n += len(l.list[i].Later) * laterCost
	}
	return n
}

// Reader is uid's resident reader state.
func (r *Resident[R]) Reader(uid uint64) (R, bool) {
	if r == nil {
		var zero R
		return zero, false
	}
	st, ok := r.readers[uid]
	r.count(ok)
	return st, ok
}

// record is a copy of u's resident like record that a transaction may change: its list
// is its own (a state changed is replaced, never written in place: see Likes.Toggle).
func (r *Resident[R]) record(u uint64) (*likes, bool) {
	if r == nil {
		return nil, false
	}
	l, ok := r.likes[u]
	r.count(ok)
	if !ok {
		return nil, false
	}
	// A heavy user's states are shared, never changed by the transaction (see over).
	return &likes{heavy: l.heavy, list: slices.Clone(l.list), states: l.states, statesCost: l.statesCost, tooMany: l.tooMany}, true
}

func (r *Resident[R]) count(hit bool) {
	if hit {
		r.Hits++
	} else {
		r.Misses++
	}
}

// Keep takes in what a committed transaction read and wrote of reader states (readers,
// unread.Readers.Seen) and likes: the users already resident, and those the doorkeeper
// has seen before. l's records become the resident ones: l is not used again.
func (r *Resident[R]) Keep(readers map[uint64]R, l *Likes) {
	if r == nil || r.max < r.minResident() {
		return
	}
	for uid, st := range readers {
		if old, ok := r.readers[uid]; ok {
			r.size -= old.Cost()
		} else if !r.admit(uid) {
			continue
		}
		r.readers[uid] = st
		r.size += st.Cost()
	}
	if l != nil {
		for _, ur := range l.order {
			u, rec := ur.u, ur.r
			rec.mergeOver() // committed: into the states it shares with the resident record
			if old, ok := r.likes[u]; ok {
				r.size -= recordCost(old)
			} else if !r.admit(u) {
				continue
			}
			rec.list, rec.dirty = slices.Clip(rec.list), false
			r.likes[u] = rec
			r.size += recordCost(rec)
		}
	}
	r.shrink()
}

// admit reports whether the doorkeeper has seen uid before, and marks it seen.
func (r *Resident[R]) admit(uid uint64) bool {
	h := uid * 0x9e3779b97f4a7c15 >> (64 - doorBits)
	w, bit := h/64, uint64(1)<<(h%64)
	if r.door[w]&bit != 0 {
		return true
	}
	r.door[w] |= bit
	if r.doorSet++; r.doorSet >= 1<<doorBits/2 {
		r.door, r.doorSet = [doorWords]uint64{}, 0
	}
	return false
}

// shrink forgets users at random until the resident state is under seven eighths of
// its budget.
func (r *Resident[R]) shrink() {
	if r.size <= r.max {
		return
	}
	for uid, st := range r.readers {
		if r.size <= r.max*7/8 {
			return
		}
		delete(r.readers, uid)
		r.size -= st.Cost()
	}
	for u, l := range r.likes {
		if r.size <= r.max*7/8 {
			return
		}
		delete(r.likes, u)
		r.size -= recordCost(l)
	}
}
