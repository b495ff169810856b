package rel

import (
	"encoding/binary"
	"fmt"
)

// version is the first byte of a state stored on its own (Marshal). The values stored
// before states existed — a relation's time, or its time and place, 8 or 16 bytes big
// endian — begin with a zero byte: a time in milliseconds is below 2^56.
const version = 2

const (
	flagOn  = 1 << 0
	flagOff = 1 << 1 // Off is stored (On: a tombstone before Made)
)

// Marshal encodes s on its own, as a relation key's value, in one allocation of
// MarshalSize.
func (s *State) Marshal() []byte { return s.MarshalAppend(make([]byte, 0, s.MarshalSize())) }

// MarshalAppend appends Marshal's encoding of s to b.
func (s *State) MarshalAppend(b []byte) []byte { return s.Append(append(b, version)) }

// MarshalSize is the most bytes Marshal takes: a version, flags, Off, a count and its
// events at their longest (3 uvarints each).
func (s *State) MarshalSize() int { return 3 + binary.MaxVarintLen64*(4+3*len(s.Later)) }

// Unmarshal decodes a relation key's value: a state, or a value of the layout before
// states (a relation made at that time and place, never undone).
func Unmarshal(v []byte) (State, error) {
	switch {
	case len(v) > 0 && v[0] == version:
		s, n, err := Decode(v[1:])
		if err == nil && n != len(v)-1 {
			err = fmt.Errorf("%w: %d bytes after the state", ErrCorrupt, len(v)-1-n)
		}
		return s, err
	case len(v) == 8:
		return State{On: true, Made: Event{TS: int64(binary.BigEndian.Uint64(v))}}, nil
	case len(v) == 16:
		return State{On: true, Made: Event{TS: int64(binary.BigEndian.Uint64(v)), Place: binary.BigEndian.Uint64(v[8:])}}, nil
	}
	return State{}, fmt.Errorf("%w: value of %d bytes", ErrCorrupt, len(v))
}

// Append appends s's encoding (without a version byte: for a record of many) to b:
// flags, then uvarints — Made's place, time and owner, Off, the Later events — of which
// those a state does not have are left out. A like made and never undone takes about 17
// bytes.
func (s *State) Append(b []byte) []byte {
	var flags byte
	if s.On {
		flags |= flagOn
	}
	if s.Off != 0 {
		flags |= flagOff
	}
	b = append(b, flags)
	if s.Off != 0 {
		b = binary.AppendUvarint(b, s.Off)
	}
	if !s.On {
		return b
	}
	b = appendEvent(b, s.Made)
	b = binary.AppendUvarint(b, uint64(len(s.Later)))
	for _, e := range s.Later {
		b = appendEvent(b, e)
	}
	return b
}

func appendEvent(b []byte, e Event) []byte {
	b = binary.AppendUvarint(b, e.Place)
	b = binary.AppendVarint(b, e.TS)
	return binary.AppendUvarint(b, e.Owner)
}

// Decode decodes a state Append wrote at the start of b and returns how many bytes it
// took.
func Decode(b []byte) (State, int, error) {
	d := decoder{b: b}
	var s State
	flags := d.byte()
	if flags&^(flagOn|flagOff) != 0 {
		return s, 0, fmt.Errorf("%w: flags %#x", ErrCorrupt, flags)
	}
	s.On = flags&flagOn != 0
	if flags&flagOff != 0 {
		s.Off = d.uvarint()
	}
	if s.On {
		s.Made = d.event()
		n := d.uvarint()
		if n > MaxLater {
			return s, 0, fmt.Errorf("%w: %d later events", ErrCorrupt, n)
		}
		if n > 0 {
			s.Later = make([]Event, n)
			for i := range s.Later {
				s.Later[i] = d.event()
			}
		}
	}
	if d.err != nil {
		return State{}, 0, d.err
	}
	return s, d.n, nil
}

type decoder struct {
	b   []byte
	n   int
	err error
}

func (d *decoder) byte() byte {
	if d.err != nil || d.n >= len(d.b) {
		d.fail()
		return 0
	}
	d.n++
	return d.b[d.n-1]
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, k := binary.Uvarint(d.b[d.n:])
	if k <= 0 {
		d.fail()
		return 0
	}
	d.n += k
	return v
}

func (d *decoder) event() Event {
	e := Event{Place: d.uvarint()}
	if d.err == nil {
		v, k := binary.Varint(d.b[d.n:])
		if k <= 0 {
			d.fail()
			return e
		}
		e.TS, d.n = v, d.n+k
	}
	e.Owner = d.uvarint()
	return e
}

func (d *decoder) fail() {
	if d.err == nil {
		d.err = fmt.Errorf("%w: truncated", ErrCorrupt)
	}
}
