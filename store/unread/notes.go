package unread

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/internal/keys"
)

// A user's notifications that were counted and that no read has covered yet are kept by
// place, so that a read handed over late recounts exactly those placed after it and an
// undone like takes back its own. Up to maxInlineNotes of a kind are kept in the user's
// reader state itself, which a transaction writes once whatever it changed (Readers).
// Past that they go under keys, written by Readers.Flush once a transaction:
//
//   - a chunk, N|p|uid|kind|top|batch: the places the transaction recorded for the user
//     and kind, top the greatest, batch the transaction's (so no two chunks share a
//     key), its value the places (appendNotes; none for a chunk of top alone);
//   - a taking back, N|p|uid|KIND|seq|batch (the kind's letter in capitals): a place
//     recorded in a chunk before this transaction, taken back. Counting subtracts it;
//     nothing is read or rewritten to take a place back (a chunk holds hundreds).
//
// A chunk is under its greatest place, a taking back under its place: the places after
// any place are under the keys after it, and a read drops the keys it covers. Before
// layout 4 (cold.LayoutNoteChunks) each place was a key of its own, N|p|uid|kind|seq
// with no value, read as a chunk of one. Keyed says how far such keys may go, so that
// neither a read nor a taking back looks for keys where there can be none. A state
// written before Pending existed has all of its notifications as keys, up to Noted: the
// first change moves its marks over (upgrade).

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
// than maxInlineNotes of that kind, else in the chunk Flush writes for the transaction.
// r is then to be stored (Put). A place is recorded once at a time: the event rules
// notify where a relation is made and take the notification back before it can be made
// there again — and count it each time, so a second record of a place recorded would be
// a count too many already. Nothing is read to make sure (a look-up of a key that is not
// there cost 11 % of all CPU under many late notifications of popular owners).
func (rd *Readers) AddNote(uid uint64, r *ReaderState, kind string, seq uint64) {
	i := noteIndex(kind)
	r.upgrade()
	r.Noted[i] = max(r.Noted[i], seq)
	pend := r.Pending[i]
	j, found := slices.BinarySearch(pend, seq)
	switch {
	case found:
		return
	case len(pend) < maxInlineNotes:
		r.Pending[i] = slices.Insert(slices.Clip(pend), j, seq)
		return
	}
	r.Keyed[i] = max(r.Keyed[i], seq)
	n := rd.note(noteKey{uid, i})
	n.added = append(n.added, seq)
	rd.nfresh++
}

// TakeNote takes back uid's notification of kind placed at seq, wherever it is
// recorded. r is then to be stored (Put).
func (rd *Readers) TakeNote(uid uint64, r *ReaderState, kind string, seq uint64) {
	i := noteIndex(kind)
	keyed := r.keyed(i)
	r.upgrade()
	if j, found := slices.BinarySearch(r.Pending[i], seq); found {
		r.Pending[i] = slices.Delete(slices.Clone(r.Pending[i]), j, j+1)
		return
	}
	if seq > keyed {
		return
	}
	n := rd.note(noteKey{uid, i})
	if j := slices.Index(n.added, seq); j >= 0 {
		n.added = slices.Delete(n.added, j, j+1)
		rd.nfresh--
	} else {
		n.taken = append(n.taken, seq)
		rd.ntaken++
	}
}

// CountNotes counts uid's recorded notifications of kind placed after after.
func (rd *Readers) CountNotes(txn *cold.Txn, uid uint64, r *ReaderState, kind string, after uint64) uint64 {
	i := noteIndex(kind)
	pend := r.Pending[i]
	j, found := slices.BinarySearch(pend, after)
	if found {
		j++
	}
	n := int64(len(pend) - j)
	if fresh, ok := rd.fresh[noteKey{uid, i}]; ok {
		for _, at := range fresh.added {
			if at > after {
				n++
			}
		}
		for _, at := range fresh.taken {
			if at > after {
				n--
			}
		}
	}
	if r.keyed(i) > after {
		n += countNotified(txn, rd.p, uid, kind, after)
	}
	return uint64(max(n, 0))
}

// DropNotes forgets uid's notifications of kind placed at or before through, which a
// read covers; the read before it was at prev. Of the keys, at most limit go (the rest
// are never counted again, and go with later reads). r is then to be stored (Put).
func (rd *Readers) DropNotes(txn *cold.Txn, uid uint64, r *ReaderState, kind string, prev, through uint64, limit int) error {
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
	if fresh, ok := rd.fresh[noteKey{uid, i}]; ok {
		covered := func(at uint64) bool { return at <= through }
		na, nt := len(fresh.added), len(fresh.taken)
		fresh.added = slices.DeleteFunc(fresh.added, covered)
		fresh.taken = slices.DeleteFunc(fresh.taken, covered)
		rd.nfresh -= na - len(fresh.added)
		rd.ntaken -= nt - len(fresh.taken)
	}
	if keyed <= prev {
		return nil // no key after the read before
	}
	return DropNotified(txn, rd.p, uid, kind, through, limit)
}

// noteKey is a user's notifications of one kind (noteIndex).
type noteKey struct {
	uid  uint64
	kind int
}

// notes are what a transaction recorded of a user's notifications of a kind past the
// reader state (added) and took back of those recorded before it (taken).
type notes struct {
	added, taken []uint64
}

// note returns what the transaction recorded of k, made on first use.
func (rd *Readers) note(k noteKey) *notes {
	n, ok := rd.fresh[k]
	if !ok {
		n = &notes{}
		rd.fresh[k] = n
		rd.order = append(rd.order, k)
	}
	return n
}

// flushNotes writes what the transaction recorded past the reader states: for each user
// and kind a chunk of the places added, and the places taken back, under batch.
func (rd *Readers) flushNotes(txn *cold.Txn, batch uint64) error {
	var buf []byte
	for _, k := range rd.order {
		n := rd.fresh[k]
		kind := noteKinds[k.kind]
		if len(n.added) > 0 {
			slices.Sort(n.added)
			top := n.added[len(n.added)-1]
			var v []byte
			if len(n.added) > 1 {
				buf = appendNotes(buf[:0], n.added)
				v = slices.Clip(buf)
				buf = buf[len(buf):]
			}
			if err := txn.Set(notifiedPrefix(rd.p, k.uid, kind).U64(top).U64(batch), v); err != nil {
				return err
			}
		}
		for _, at := range n.taken {
			if err := txn.Set(takenPrefix(rd.p, k.uid, kind).U64(at).U64(batch), nil); err != nil {
				return err
			}
		}
	}
	clear(rd.fresh)
	rd.order, rd.nfresh, rd.ntaken = rd.order[:0], 0, 0
	return nil
}

// noteKinds are the kinds by noteIndex.
var noteKinds = [...]string{"comment", "mention", "like", "dm"}

// appendNotes appends places, ascending, as a chunk's value: each as its difference from
// the one before (the first from 0), in uvarints.
func appendNotes(b []byte, at []uint64) []byte {
	prev := uint64(0)
	for _, x := range at {
		b = binary.AppendUvarint(b, x-prev)
		prev = x
	}
	return b
}

// readNotes calls fn with each place of the chunk under top, whose value is v.
func readNotes(top uint64, v []byte, fn func(at uint64)) error {
	if len(v) == 0 {
		fn(top)
		return nil
	}
	at := uint64(0)
	for len(v) > 0 {
		d, n := binary.Uvarint(v)
		if n <= 0 {
			return fmt.Errorf("%w: notification chunk %d cut short", cold.ErrCorrupt, top)
		}
		at += d
		v = v[n:]
		fn(at)
	}
	if at != top {
		return fmt.Errorf("%w: notification chunk %d ends at %d", cold.ErrCorrupt, top, at)
	}
	return nil
}

// kindByte is a notification kind in keys: its first letter (comment, mention, like, dm).
func kindByte(kind string) byte { return kind[0] }

func notifiedPrefix(p int, uid uint64, kind string) keys.Key {
	return keys.New(keys.NSNotified, 28).U16(p).U64(uid).U8(kindByte(kind))
}

// takenPrefix holds uid's notifications of kind taken back: under the kind's letter in
// capitals.
func takenPrefix(p int, uid uint64, kind string) keys.Key {
	return keys.New(keys.NSNotified, 28).U16(p).U64(uid).U8(kindByte(kind) - 'a' + 'A')
}

// AddNotified records that a notification of kind for uid (of partition p), of place
// seq, was counted, as a key of its own: the layout before chunks, which tests write.
func AddNotified(txn *cold.Txn, p int, uid uint64, kind string, seq uint64) error {
	return txn.Set(notifiedPrefix(p, uid, kind).U64(seq), nil)
}

// CountNotified counts uid's recorded notifications of kind placed after after, less
// those taken back.
func CountNotified(txn *cold.Txn, p int, uid uint64, kind string, after uint64) uint64 {
	return uint64(max(countNotified(txn, p, uid, kind, after), 0))
}

// countNotified is the places after after in the chunks under the keys after it, less
// the places after it taken back.
func countNotified(txn *cold.Txn, p int, uid uint64, kind string, after uint64) int64 {
	if after == ^uint64(0) {
		return 0
	}
	prefix := notifiedPrefix(p, uid, kind)
	var n int64
	count := func(at uint64) {
		if at > after {
			n++
		}
	}
	_ = txn.Scan(prefix, append(keys.Key{}, prefix...).U64(after+1), true, func(k, v []byte) (bool, error) {
		if len(k) < len(prefix)+8 {
			return true, nil
		}
		return true, readNotes(keys.U64At(k, len(prefix)), v, count)
	})
	return n - int64(countAfter(txn, takenPrefix(p, uid, kind), after, ^uint64(0)))
}

// DropNotified deletes up to limit of uid's chunks of kind under places at or before
// through, and of the places taken back at or before it: a read covers them, and nothing
// counts them again.
func DropNotified(txn *cold.Txn, p int, uid uint64, kind string, through uint64, limit int) error {
	var drop [][]byte
	for _, prefix := range []keys.Key{notifiedPrefix(p, uid, kind), takenPrefix(p, uid, kind)} {
		err := txn.Scan(prefix, nil, false, func(k, _ []byte) (bool, error) {
			if len(drop) >= limit || len(k) < len(prefix)+8 || keys.U64At(k, len(prefix)) > through {
				return false, nil
			}
			drop = append(drop, slices.Clone(k))
			return true, nil
		})
		if err != nil {
			return err
		}
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
