package unread

import (
	"slices"

	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/internal/keys"
)

// A user's notifications that were counted and that no read has covered yet are kept by
// place, so that a read handed over late recounts exactly those placed after it and an
// undone like takes back its own. Up to maxInlineNotes of a kind are kept in the user's
// reader state itself, which a transaction writes once whatever it changed (Readers);
// only past that does each go under a key of its own (N|p|uid|kind|seq), one write and
// one delete each. Keyed says how far such keys may go, so that neither a read nor a
// taking back looks for keys where there can be none. A state written before Pending
// existed has all of its notifications as keys, up to Noted: the first change moves
// its marks over (upgrade).

// maxInlineNotes is the most notifications of one kind a reader state keeps itself.
const maxInlineNotes = 32

// keyed is how far uid's notifications of kind i may be keys.
func (r *ReaderState) keyed(i int) uint64 {
	if !r.Inline {
		return r.Noted[i]
	}
	return r.Keyed[i]
}

func (r *ReaderState) upgrade() {
	if !r.Inline {
		r.Inline, r.Keyed = true, r.Noted
	}
}

// AddNote records uid's notification of kind placed at seq, in r while it keeps fewer
// than maxInlineNotes of that kind, else under a key (partition p). r is then to be
// stored. A place is recorded once at a time: the event rules notify where a relation
// is made and take the notification back before it can be made there again — and count
// it each time, so a second record of a place recorded would be a count too many
// already. Nothing is read to make sure (a look-up of a key that is not there cost 11 %
// of all CPU under many late notifications of popular owners).
func AddNote(txn *cold.Txn, p int, uid uint64, r *ReaderState, kind string, seq uint64) error {
	i := noteIndex(kind)
	r.upgrade()
	r.Noted[i] = max(r.Noted[i], seq)
	pend := r.Pending[i]
	j, found := slices.BinarySearch(pend, seq)
	switch {
	case found:
		return nil
	case len(pend) < maxInlineNotes:
		r.Pending[i] = slices.Insert(slices.Clip(pend), j, seq)
		return nil
	}
	r.Keyed[i] = max(r.Keyed[i], seq)
	return AddNotified(txn, p, uid, kind, seq)
}

// TakeNote takes back uid's notification of kind placed at seq, wherever it is
// recorded. r is then to be stored.
func TakeNote(txn *cold.Txn, p int, uid uint64, r *ReaderState, kind string, seq uint64) error {
	i := noteIndex(kind)
	keyed := r.keyed(i)
	r.upgrade()
	if j, found := slices.BinarySearch(r.Pending[i], seq); found {
		r.Pending[i] = slices.Delete(slices.Clone(r.Pending[i]), j, j+1)
		return nil
	}
	if seq > keyed {
		return nil
	}
	return DeleteNotified(txn, p, uid, kind, seq)
}

// CountNotes counts uid's recorded notifications of kind placed after after.
func CountNotes(txn *cold.Txn, p int, uid uint64, r *ReaderState, kind string, after uint64) uint64 {
	i := noteIndex(kind)
	pend := r.Pending[i]
	j, found := slices.BinarySearch(pend, after)
	if found {
		j++
	}
	n := uint64(len(pend) - j)
	if r.keyed(i) > after {
		n += CountNotified(txn, p, uid, kind, after)
	}
	return n
}

// DropNotes forgets uid's notifications of kind placed at or before through, which a
// read covers; the read before it was at prev. Of the keys, at most limit go (the rest
// are never counted again, and go with later reads). r is then to be stored.
func DropNotes(txn *cold.Txn, p int, uid uint64, r *ReaderState, kind string, prev, through uint64, limit int) error {
	i := noteIndex(kind)
	keyed := r.keyed(i)
	r.upgrade()
	pend := r.Pending[i]
	j, found := slices.BinarySearch(pend, through)
	if found {
		j++
	}
	r.Pending[i] = pend[j:]
	if len(r.Pending[i]) == 0 {
		r.Pending[i] = nil
	}
	if keyed <= prev {
		return nil // no key after the read before
	}
	return DropNotified(txn, p, uid, kind, through, limit)
}

// kindByte is a notification kind in keys: its first letter (comment, mention, like, dm).
func kindByte(kind string) byte { return kind[0] }

func notifiedPrefix(p int, uid uint64, kind string) keys.Key {
	return keys.New(keys.NSNotified, 20).U16(p).U64(uid).U8(kindByte(kind))
}

// AddNotified records that a notification of kind for uid (of partition p), of place
// seq, was counted.
func AddNotified(txn *cold.Txn, p int, uid uint64, kind string, seq uint64) error {
	return txn.Set(notifiedPrefix(p, uid, kind).U64(seq), nil)
}

// DeleteNotified removes the record of uid's notification of kind placed at seq.
func DeleteNotified(txn *cold.Txn, p int, uid uint64, kind string, seq uint64) error {
	return txn.Delete(notifiedPrefix(p, uid, kind).U64(seq))
}

// CountNotified counts uid's recorded notifications of kind placed after seq.
func CountNotified(txn *cold.Txn, p int, uid uint64, kind string, after uint64) uint64 {
	return countAfter(txn, notifiedPrefix(p, uid, kind), after, ^uint64(0))
}

// DropNotified deletes up to limit of uid's recorded notifications of kind placed at or
// before through: a read covers them, and nothing counts them again.
func DropNotified(txn *cold.Txn, p int, uid uint64, kind string, through uint64, limit int) error {
	prefix := notifiedPrefix(p, uid, kind)
	var drop [][]byte
	err := txn.Scan(prefix, nil, false, func(k, _ []byte) (bool, error) {
		if len(drop) >= limit || len(k) != len(prefix)+8 || keys.U64At(k, len(prefix)) > through {
			return false, nil
		}
		drop = append(drop, slices.Clone(k))
		return true, nil
	})
	if err != nil {
		return err
	}
	for _, k := range drop {
		if err := txn.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// countAfter counts the keys prefix|seq (with anything after seq) with seq > after, up
// to limit.
func countAfter(txn *cold.Txn, prefix keys.Key, after, limit uint64) uint64 {
	if after == ^uint64(0) || limit == 0 {
		return 0
	}
	var n uint64
	_ = txn.Scan(prefix, append(keys.Key{}, prefix...).U64(after+1), false, func(_, _ []byte) (bool, error) {
		n++
		return n < limit, nil
	})
	return n
}
