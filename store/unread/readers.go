package unread

import (
	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/graph"
)

// Readers reads and writes the reader states of partition p in one transaction: from
// what the transaction changed, the partition's graph.Resident, or the database, and
// keeps what it read and changed for Resident.Keep (Seen). Flush writes each changed
// state once, however many notifications changed it. A Readers is not safe for
// concurrent use.
type Readers struct {
	p     int
	res   *graph.Resident[ReaderState]
	seen  map[uint64]ReaderState
	dirty map[uint64]bool
}

// NewReaders starts a transaction's reader states of partition p, read through res
// (which may be nil).
func NewReaders(p int, res *graph.Resident[ReaderState]) *Readers {
	return &Readers{p: p, res: res, seen: map[uint64]ReaderState{}, dirty: map[uint64]bool{}}
}

// Get returns uid's reader state (zero if none).
func (r *Readers) Get(txn *cold.Txn, uid uint64) (ReaderState, error) {
	if st, ok := r.seen[uid]; ok {
		return st, nil
	}
	if st, ok := r.res.Reader(uid); ok {
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
func (r *Readers) Flush(txn *cold.Txn) error {
	for uid := range r.dirty {
		if err := PutReader(txn, r.p, uid, r.seen[uid]); err != nil {
			return err
		}
		delete(r.dirty, uid)
	}
	return nil
}

// Pending is about what Flush would write now, as Badger counts a transaction's bytes,
// and how many keys: a reader state is taken at 128 bytes (see event.Stage's bound).
func (r *Readers) Pending() (bytes, keys int) { return 128 * len(r.dirty), len(r.dirty) }

// Seen is every state the transaction read or wrote, for Resident.Keep once it has
// committed (nil for a nil Readers).
func (r *Readers) Seen() map[uint64]ReaderState {
	if r == nil {
		return nil
	}
	return r.seen
}
