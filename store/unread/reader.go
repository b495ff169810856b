package unread

import (
	"encoding/binary"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/internal/keys"
)

// ReaderState is the place (Event.Seq) of a user's last read of each kind, and of the
// last notification of each kind recorded for them (so that a read looks for records
// only when there are some).
type ReaderState struct {
	Comment uint64 `msgpack:"c,omitempty"`
	Mention uint64 `msgpack:"m,omitempty"`
	Like    uint64 `msgpack:"l,omitempty"`
	DM      uint64 `msgpack:"d,omitempty"`
	Feed    uint64 `msgpack:"f,omitempty"`
	System  uint64 `msgpack:"s,omitempty"`
	// Noted is the place of the last notification recorded, per kind (comment,
	// mention, like, dm).
	Noted [4]uint64 `msgpack:"n,omitempty"`
	// Pending are the places of the notifications of each kind recorded in the state
	// itself, ascending (see AddNote); Keyed is how far those recorded under keys of
	// their own may go. Inline is false in a state written before them, whose
	// notifications are all keys, up to Noted. Pending's slices are never written in
	// place — a changed one is a copy — since a resident state shares them.
	Pending [4][]uint64 `msgpack:"p,omitempty"`
	Keyed   [4]uint64   `msgpack:"k,omitempty"`
	Inline  bool        `msgpack:"i,omitempty"`
}

// Note returns where the place of the last recorded notification of kind is kept.
func (r *ReaderState) Note(kind string) *uint64 { return &r.Noted[noteIndex(kind)] }

// noteIndex is a notification kind's index in Noted, Pending and Keyed: comment,
// mention, like, dm.
func noteIndex(kind string) int {
	switch kind {
	case "comment":
		return 0
	case "mention":
		return 1
	case "like":
		return 2
	}
	return 3
}

// Read returns where the last read of kind is kept (nil for an unknown kind).
func (r *ReaderState) Read(kind string) *uint64 {
	switch kind {
	case "comment":
		return &r.Comment
	case "mention":
		return &r.Mention
	case "like":
		return &r.Like
	case "dm":
		return &r.DM
	case "feed":
		return &r.Feed
	case "system":
		return &r.System
	}
	return nil
}

// Cost is what the state costs held in RAM, for graph.Resident's budget: a map entry, its
// key and the state as Go holds them.
func (r ReaderState) Cost() int {
	n := readerCost
	for _, p := range r.Pending {
		n += 8 * len(p)
	}
	return n
}

const readerCost = 8 + 216 + 40 // uid, ReaderState, a map entry's share

func readerKey(p int, uid uint64) keys.Key { return keys.New(keys.NSReader, 11).U16(p).U64(uid) }

// GetReader returns the reader state of uid, of partition p (zero if none).
func GetReader(txn *cold.Txn, p int, uid uint64) (ReaderState, error) {
	var st ReaderState
	_, err := txn.Get(readerKey(p, uid), func(v []byte) (err error) {
		if st, err = decodeReader(v); err != nil {
			return fmt.Errorf("%w: reader %d: %w", cold.ErrCorrupt, uid, err)
		}
		return nil
	})
	if err != nil {
		return ReaderState{}, err
	}
	return st, nil
}

// PutReader stores the reader state of uid, of partition p.
func PutReader(txn *cold.Txn, p int, uid uint64, st ReaderState) error {
	return txn.Set(readerKey(p, uid), appendReader(make([]byte, 0, 32), &st))
}

// A reader state is written by every transaction that notifies its user, so it has a
// compact form of its own: readerVersion, a flags byte (readerInline), then uvarints —
// the six reads, Noted, Keyed, and per kind the count of Pending and its places as
// differences (ascending). A state written before (a MessagePack map, which never
// starts with readerVersion) is still read.
const (
	readerVersion = 1
	readerInline  = 1
)

// appendReader appends st's compact form to b.
func appendReader(b []byte, st *ReaderState) []byte {
	flags := byte(0)
	if st.Inline {
		flags |= readerInline
	}
	b = append(b, readerVersion, flags)
	for _, v := range [...]uint64{st.Comment, st.Mention, st.Like, st.DM, st.Feed, st.System} {
		b = binary.AppendUvarint(b, v)
	}
	for _, v := range st.Noted {
		b = binary.AppendUvarint(b, v)
	}
	for _, v := range st.Keyed {
		b = binary.AppendUvarint(b, v)
	}
	for _, pend := range st.Pending {
		b = binary.AppendUvarint(b, uint64(len(pend)))
		prev := uint64(0)
		for _, at := range pend {
			b = binary.AppendUvarint(b, at-prev)
			prev = at
		}
	}
	return b
}

// decodeReader reads a reader state in either form.
func decodeReader(v []byte) (ReaderState, error) {
	var st ReaderState
	if len(v) == 0 || v[0] != readerVersion {
		err := msgpack.Unmarshal(v, &st)
		return st, err
	}
	if len(v) < 2 || v[1]&^readerInline != 0 {
		return st, fmt.Errorf("reader state flags %x", v[:min(len(v), 2)])
	}
	st.Inline = v[1]&readerInline != 0
	b := v[2:]
	next := func() (uint64, error) {
		x, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, fmt.Errorf("reader state of %d bytes cut short", len(v))
		}
		b = b[n:]
		return x, nil
	}
	fields := [...]*uint64{&st.Comment, &st.Mention, &st.Like, &st.DM, &st.Feed, &st.System,
		&st.Noted[0], &st.Noted[1], &st.Noted[2], &st.Noted[3], &st.Keyed[0], &st.Keyed[1], &st.Keyed[2], &st.Keyed[3]}
	for _, f := range fields {
		x, err := next()
		if err != nil {
			return st, err
		}
		*f = x
	}
	for i := range st.Pending {
		n, err := next()
		if err != nil {
			return st, err
		}
		if n > uint64(len(b)) { // each place takes a byte at least
			return st, fmt.Errorf("reader state: %d places in %d bytes", n, len(b))
		}
		at := uint64(0)
		for range n {
			d, err := next()
			if err != nil {
				return st, err
			}
			at += d
			st.Pending[i] = append(st.Pending[i], at)
		}
	}
	if len(b) > 0 {
		return st, fmt.Errorf("reader state: %d bytes after its end", len(b))
	}
	return st, nil
}
