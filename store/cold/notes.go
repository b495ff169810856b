package cold

import (
	"slices"
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
func AddNote(txn *Txn, p int, uid uint64, r *ReaderState, kind string, seq uint64) error {
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
func TakeNote(txn *Txn, p int, uid uint64, r *ReaderState, kind string, seq uint64) error {
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
func CountNotes(txn *Txn, p int, uid uint64, r *ReaderState, kind string, after uint64) uint64 {
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
func DropNotes(txn *Txn, p int, uid uint64, r *ReaderState, kind string, prev, through uint64, limit int) error {
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
