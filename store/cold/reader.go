package cold

import (
	"encoding/binary"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

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
