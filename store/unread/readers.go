package unread

import (
	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/graph"
)

// Readers reads and writes the reader states of partition p in one transaction: from
// what the transaction changed, the partition's graph.Resident, or the database, and
// keeps what it read and changed for Resident.Keep (Seen). Flush writes each changed
// state once, however many notifications changed it, and the notifications recorded
// past what the states keep in one chunk for each user and kind (see AddNote). A Readers
// is not safe for concurrent use.
type Readers struct {
	p     int
	res   *graph.Resident[ReaderState]
	seen  map[uint64]ReaderState
	dirty map[uint64]bool
	// The notifications recorded past the states', and taken back, since the last
	// Flush, by user and kind (in the order first recorded), and how many of each.
	fresh          map[noteKey]*notes
	order          []noteKey
	nfresh, ntaken int
}

// NewReaders starts a transaction's reader states of partition p, read through res
// (which may be nil).
func NewReaders(p int, res *graph.Resident[ReaderState]) *Readers {
	return &Readers{p: p, res: res, seen: map[uint64]ReaderState{}, dirty: map[uint64]bool{}, fresh: map[noteKey]*notes{}}
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

// Flush stores the changed reader states, and what the transaction recorded of
// notifications past them (see AddNote) under batch, a number no other transaction of
// the partition has, in txn.
func (r *Readers) Flush(txn *cold.Txn, batch uint64) error {
	if err := r.flushNotes(txn, batch); err != nil {
		return err
	}
	for uid := range r.dirty {
		if err := PutReader(txn, r.p, uid, r.seen[uid]); err != nil {
			return err
		}
		delete(r.dirty, uid)
	}
	return nil
}

// Pending is about what Flush would write now, as Badger counts a transaction's bytes,
// and how many keys: a reader state is taken at 128 bytes, a chunk at 48 and 4 a
// notification in it (see event.Stage's bound) — a place taken back at 48 as well.
func (r *Readers) Pending() (bytes, keys int) {
	return 128*len(r.dirty) + 48*len(r.order) + 48*r.ntaken + 4*r.nfresh, len(r.dirty) + len(r.order) + r.ntaken
}

// Seen is every state the transaction read or wrote, for Resident.Keep once it has
// committed (nil for a nil Readers).
func (r *Readers) Seen() map[uint64]ReaderState {
	if r == nil {
		return nil
	}
	return r.seen
}
