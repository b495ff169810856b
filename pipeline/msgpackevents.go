package pipeline

import (
	"fmt"

	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// The readers of Event, Batch and HopBatch from payload bytes (see mpReader), each the
// counterpart of its DecodeMsgpack.

// readEvent reads e as Event.DecodeMsgpack does: nil is the zero event, the array form
// sets every field, the map form only those it holds.
func (r *mpReader) readEvent(e *Event) error {
	c, err := r.peek()
	switch {
	case err != nil:
		return err
	case c == msgpcode.Nil:
		r.i++
		*e = Event{}
		return nil
	}
	n, asArray, err := r.structLen()
	switch {
	case err != nil:
		return err
	case asArray && n == 0:
		*e = Event{}
		return nil
	case asArray && n != len(eventFields):
		return fmt.Errorf("msgpack: array of %d values for an event of %d fields", n, len(eventFields))
	case asArray:
		for f := range eventFields {
			if err := r.readEventField(e, f); err != nil {
				return err
			}
		}
		return nil
	}
	for range n {
		name, err := r.str()
		if err != nil {
			return err
		}
		f := eventField(name)
		if f < 0 {
			return fmt.Errorf("msgpack: unknown field %q", name)
		}
		if err := r.readEventField(e, f); err != nil {
			return err
		}
	}
	return nil
}

// eventField returns the place of the field named name in eventFields, -1 for none.
func eventField(name []byte) int {
	switch string(name) {
	case "type":
		return 0
	case "tx":
		return 1
	case "uid":
		return 2
	case "post":
		return 3
	case "owner":
		return 4
	case "target":
		return 5
	case "comment":
		return 6
	case "family":
		return 7
	case "id":
		return 8
	case "field":
		return 9
	case "n":
		return 10
	case "kinds":
		return 11
	case "ts":
		return 12
	case "local":
		return 13
	case "seq":
		return 14
	}
	return -1
}

// readEventField reads the value of field f (its place in eventFields), as
// Event.decodeField does.
func (r *mpReader) readEventField(e *Event, f int) (err error) {
	switch f {
	case 0:
		var b []byte
		if b, err = r.str(); err == nil {
			e.Type = internType(b)
		}
	case 1:
		e.Tx, err = r.string()
	case 2:
		err = r.id(&e.UID)
	case 3:
		err = r.id(&e.Post)
	case 4:
		err = r.id(&e.Owner)
	case 5:
		err = r.id(&e.Target)
	case 6:
		err = r.id(&e.Comment)
	case 7:
		e.Family, err = r.string()
	case 8:
		err = r.id(&e.ID)
	case 9:
		e.Field, err = r.string()
	case 10:
		e.N, err = r.int64()
	case 11:
		var n int
		if n, err = r.arrayLen(); err != nil || n < 0 {
			return err // nil leaves the kinds as they were, as decodeField does
		}
		e.Kinds = make([]string, 0, min(n, 64))
		for range n {
			k, err := r.string()
			if err != nil {
				return err
			}
			e.Kinds = append(e.Kinds, k)
		}
	case 12:
		e.TS, err = r.int64()
	case 13:
		e.Local, err = r.bool()
	case 14:
		e.Seq, err = r.uint64()
	}
	return err
}

// internType returns an event type, the common ones without allocating.
func internType(b []byte) string {
	for _, t := range commonTypes {
		if string(b) == t {
			return t
		}
	}
	return string(b)
}

// id reads an id as decodeID does: any integer that is not negative, nil as 0, or a
// decimal string.
func (r *mpReader) id(id *ID) error {
	if r.i < len(r.b) && r.b[r.i] <= msgpcode.PosFixedNumHigh { // a small id, without a call
		*id = ID(r.b[r.i])
		r.i++
		return nil
	}
	c, err := r.code()
	if err != nil {
		return err
	}
	v, ok, err := r.integer(c)
	switch {
	case err != nil:
		return err
	case ok && v < 0 && (c >= msgpcode.NegFixedNumLow || c >= msgpcode.Int8 && c <= msgpcode.Int64):
		return fmt.Errorf("id %d is negative", v)
	case ok:
		*id = ID(v)
		return nil
	}
	n, ok, err := r.strLen(c)
	if ok {
		var b []byte
		if err == nil {
			b, err = r.bytes(uint64(max(n, 0)))
		}
		if err != nil {
			return err
		}
		p, err := ParseID(string(b))
		if err == nil {
			*id = p
		}
		return err
	}
	// What ID.DecodeMsgpack reads as a value of another type (a container is not read
	// through: the payload is refused whatever it holds).
	what := "a container or an extension"
	switch c {
	case msgpcode.False, msgpcode.True:
		what = "bool"
	case msgpcode.Float, msgpcode.Double:
		what = "float64"
	}
	return fmt.Errorf("id must be an integer or a decimal string, not %s", what)
}

// readBatch reads b as Batch.decodeMsgpack does; bounded stops at a list of more than
// MaxBatch events.
func (r *mpReader) readBatch(b *Batch, bounded bool) error {
	n, asArray, err := r.structLen()
	switch {
	case err != nil:
		return err
	case n <= 0 && (asArray || n < 0):
		*b = Batch{}
		return nil
	case asArray && n != 1:
		return fmt.Errorf("msgpack: array of %d values for a batch of 1 field", n)
	case asArray:
		return r.readEventList(&b.Events, bounded)
	}
	for range n {
		name, err := r.str()
		if err != nil {
			return err
		}
		if string(name) != "events" {
			return fmt.Errorf("msgpack: unknown field %q", name)
		}
		if err := r.readEventList(&b.Events, bounded); err != nil {
			return err
		}
	}
	return nil
}

// readHopBatch reads b as HopBatch.decodeMsgpack does; bounded stops at a list of more
// than MaxBatch events.
func (r *mpReader) readHopBatch(b *HopBatch, bounded bool) error {
	n, asArray, err := r.structLen()
	switch {
	case err != nil:
		return err
	case n <= 0 && (asArray || n < 0):
		*b = HopBatch{}
		return nil
	case asArray && n != 3:
		return fmt.Errorf("msgpack: array of %d values for a hop batch of 3 fields", n)
	}
	if asArray {
		for f := range 3 {
			if err := r.readHopField(b, f, bounded); err != nil {
				return err
			}
		}
		return nil
	}
	for range n {
		name, err := r.str()
		if err != nil {
			return err
		}
		var f int
		switch string(name) {
		case "src":
			f = 0
		case "seq":
			f = 1
		case "events":
			f = 2
		default:
			return fmt.Errorf("msgpack: unknown field %q", name)
		}
		if err := r.readHopField(b, f, bounded); err != nil {
			return err
		}
	}
	return nil
}

// readHopField reads field f of a hop batch: its source, sequence or events.
func (r *mpReader) readHopField(b *HopBatch, f int, bounded bool) (err error) {
	switch f {
	case 0:
		var v uint64
		v, err = r.uint64()
		b.Source = uint32(v) // truncated, as reflection sets a uint32
	case 1:
		b.Seq, err = r.uint64()
	default:
		err = r.readEventList(&b.Events, bounded)
	}
	return err
}

// readEventList reads a list of events into *evs as decodeEventList does: nil makes it
// nil, and the list is read over the events *evs holds at each place (within its
// capacity).
func (r *mpReader) readEventList(evs *[]Event, bounded bool) error {
	n, err := r.arrayLen() // no longer than the bytes left
	if err != nil {
		return err
	}
	if done, err := eventSlots(evs, n, bounded); done || err != nil {
		return err
	}
	s := *evs
	for i := range s {
		if err := r.readEvent(&s[i]); err != nil {
			return fmt.Errorf("event %d: %w", i, err)
		}
	}
	return nil
}
