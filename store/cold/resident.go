package cold

import (
	"slices"
)

// Resident is what an event partition's events read of its state, kept in RAM for the
// users active lately so that a like or a notification costs no Badger read: reader
// states and like records (a heavy user's only says so). It is written through: a
// transaction reads it through Readers and Likes, which keep what the transaction read
// and wrote, and Keep takes that in only once the transaction has committed — so it
// never holds what Badger does not. Only the partition's event stage writes these keys;
// a stage that loads its state afresh (a restart, a restore, a takeover) starts a new
// Resident. Past its budget it forgets users at random (a map's order), an eighth at a
// time. A Resident is not safe for concurrent use.
type Resident struct {
	max, size int
	readers   map[uint64]ReaderState
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

// What a resident entry costs, for the budget: map entry, key and value as Go holds them.
const (
	readerCost  = 8 + 216 + 40           // uid, ReaderState, a map entry's share
	likesCost   = 8 + 8 + 48 + 40        // uid, pointer, record header, map entry
	likeCost    = 8 + 24 + 24 + 24 + 8   // post, made, later header, off, on
	laterCost   = 24                     // one kept later event
	minResident = readerCost + likesCost // a budget smaller than one of each keeps nothing
)

// NewResident keeps up to maxBytes of state in RAM (none when maxBytes is 0).
func NewResident(maxBytes int) *Resident {
	return &Resident{max: maxBytes, readers: map[uint64]ReaderState{}, likes: map[uint64]*likes{}}
}

// Bytes is what the resident state costs now, by the budget's measure.
func (r *Resident) Bytes() int {
	if r == nil {
		return 0
	}
	return r.size
}

func readerBytes(st ReaderState) int {
	n := readerCost
	for _, p := range st.Pending {
		n += 8 * len(p)
	}
	return n
}

func recordCost(l *likes) int {
	n := likesCost + len(l.list)*likeCost
	for i := range l.list {
		n += len(l.list[i].Later) * laterCost
	}
	return n
}

// reader is uid's resident reader state.
func (r *Resident) reader(uid uint64) (ReaderState, bool) {
	if r == nil {
		return ReaderState{}, false
	}
	st, ok := r.readers[uid]
	r.count(ok)
	return st, ok
}

// record is a copy of u's resident like record that a transaction may change: its list
// is its own (a state changed is replaced, never written in place: see Likes.Toggle).
func (r *Resident) record(u uint64) (*likes, bool) {
	if r == nil {
		return nil, false
	}
	l, ok := r.likes[u]
	r.count(ok)
	if !ok {
		return nil, false
	}
	return &likes{heavy: l.heavy, list: slices.Clone(l.list)}, true
}

func (r *Resident) count(hit bool) {
	if hit {
		r.Hits++
	} else {
		r.Misses++
	}
}

// Keep takes in what a committed transaction read and wrote of readers and likes: the
// users already resident, and those the doorkeeper has seen before. l's records become
// the resident ones: l is not used again.
func (r *Resident) Keep(readers *Readers, l *Likes) {
	if r == nil || r.max < minResident {
		return
	}
	if readers != nil {
		for uid, st := range readers.seen {
			if old, ok := r.readers[uid]; ok {
				r.size -= readerBytes(old)
			} else if !r.admit(uid) {
				continue
			}
			r.readers[uid] = st
			r.size += readerBytes(st)
		}
	}
	if l != nil {
		for u, rec := range l.users {
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
func (r *Resident) admit(uid uint64) bool {
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
func (r *Resident) shrink() {
	if r.size <= r.max {
		return
	}
	for uid, st := range r.readers {
		if r.size <= r.max*7/8 {
			return
		}
		delete(r.readers, uid)
		r.size -= readerBytes(st)
	}
	for u, l := range r.likes {
		if r.size <= r.max*7/8 {
			return
		}
		delete(r.likes, u)
		r.size -= recordCost(l)
	}
}

// Readers reads and writes the reader states of partition p in one transaction: from
// what the transaction changed, the partition's Resident, or Badger, and keeps what it
// read and changed for Resident.Keep. Flush writes each changed state once, however
// many notifications changed it. A Readers is not safe for concurrent use.
type Readers struct {
	p     int
	res   *Resident
	seen  map[uint64]ReaderState
	dirty map[uint64]bool
}

// NewReaders starts a transaction's reader states of partition p, read through res
// (which may be nil).
func NewReaders(p int, res *Resident) *Readers {
	return &Readers{p: p, res: res, seen: map[uint64]ReaderState{}, dirty: map[uint64]bool{}}
}

// Get returns uid's reader state (zero if none).
func (r *Readers) Get(txn *Txn, uid uint64) (ReaderState, error) {
	if st, ok := r.seen[uid]; ok {
		return st, nil
	}
	if st, ok := r.res.reader(uid); ok {
		r.seen[uid] = st
		return st, nil
	}
	st, err := GetReader(txn, r.p, uid)
	if err == nil {
		r.seen[uid] = st
	}
	return st, err
}

// Put changes uid's reader state; Flush stores it.
func (r *Readers) Put(uid uint64, st ReaderState) {
	r.seen[uid], r.dirty[uid] = st, true
}

// Flush stores the changed reader states in txn.
func (r *Readers) Flush(txn *Txn) error {
	for uid := range r.dirty {
		if err := PutReader(txn, r.p, uid, r.seen[uid]); err != nil {
			return err
		}
		delete(r.dirty, uid)
	}
	return nil
}
