package pipeline

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/vmihailenco/msgpack/v5"
)

// ContentTypeJSON is the Content-Type header value that marks a JSON payload.
const ContentTypeJSON = "application/json"

// IsJSON reports whether a payload is JSON: a Content-Type header says so, or the payload
// starts with '{' or '[' (which no MessagePack map does), so a wrong JSON shape is
// reported as a JSON error.
func IsJSON(data []byte, h nats.Header) bool {
	if h != nil && h.Get("Content-Type") == ContentTypeJSON {
		return true
	}
	d := bytes.TrimLeft(data, " \t\r\n")
	return len(d) > 0 && (d[0] == '{' || d[0] == '[')
}

// Unmarshal decodes a JSON or MessagePack payload into v. Unknown fields are errors in
// both forms, so a typo is reported instead of silently ignored: it reads what
// producers and clients send (events, batches, requests). Events and batches decode
// with their own codecs (jsoncodec.go; msgpackevents.go, from the bytes), anything else
// through encoding/json or msgpack by reflection, to the same rules.
func Unmarshal(data []byte, asJSON bool, v any) error {
	return unmarshal(data, asJSON, v, true)
}

// UnmarshalReply decodes what Tally answers or announces (a reply, a change event) as
// Unmarshal does, except that a field it does not know is skipped: a newer tallyd may
// add fields (see ProtocolVersion), and a reader of an older protocol must still read
// the ones it knows. Events and batches, which are no replies, are read strictly still.
func UnmarshalReply(data []byte, asJSON bool, v any) error {
	return unmarshal(data, asJSON, v, false)
}

func unmarshal(data []byte, asJSON bool, v any, strict bool) error {
	if len(data) == 0 {
		return fmt.Errorf("empty payload")
	}
	if asJSON {
		switch v := v.(type) {
		case *Event:
			if v != nil {
				return decodeEventJSON(data, v)
			}
		case *Batch:
			if v != nil {
				return decodeBatchJSON(data, v, -1)
			}
		}
		d := json.NewDecoder(bytes.NewReader(data))
		if strict {
			d.DisallowUnknownFields()
		}
		if err := d.Decode(v); err != nil {
			return err
		}
		// Decoder.More would take a stray ] or } after the value for the end.
		if len(bytes.TrimLeft(data[d.InputOffset():], " \t\r\n")) > 0 {
			return errTrailingJSON
		}
		return nil
	}
	switch v := v.(type) {
	case *Event:
		if v != nil {
			r := mpReader{b: data}
			return r.done(r.readEvent(v))
		}
	case *Batch:
		if v != nil {
			r := mpReader{b: data}
			return r.done(r.readBatch(v, false))
		}
	case *HopBatch:
		if v != nil {
			r := mpReader{b: data}
			return r.done(r.readHopBatch(v, false))
		}
	case *GetRequest: // what the readers do not take, reflection reads again below
		if v != nil && readsAll(data, v, (*mpReader).readGetRequest) {
			return nil
		}
	case *GetReply:
		if v != nil && readsAll(data, v, (*mpReader).readGetReply) {
			return nil
		}
	case *UnreadRequest:
		if v != nil && readsAll(data, v, (*mpReader).readUnreadRequest) {
			return nil
		}
	case *UnreadReply:
		if v != nil && readsAll(data, v, (*mpReader).readUnreadReply) {
			return nil
		}
	}
	return decodeReflect(data, v, strict)
}

// readsAll reports whether read took data whole into v; when not, v is left zero for
// reflection to read again (see getcodec.go).
func readsAll[T any](data []byte, v *T, read func(*mpReader, *T) error) bool {
	r := mpReader{b: data}
	if read(&r, v) == nil && r.i == len(data) {
		return true
	}
	var zero T
	*v = zero
	return false
}

// decodeReflect decodes the MessagePack payload data into v by reflection.
func decodeReflect(data []byte, v any, strict bool) error {
	if err := checkMsgpack(data); err != nil {
		return err
	}
	r := bytes.NewReader(data)
	d := msgpack.NewDecoder(r)
	d.DisallowUnknownFields(strict)
	d.SetCustomStructTag("json")
	if err := d.Decode(v); err != nil {
		return err
	}
	if r.Len() > 0 {
		return fmt.Errorf("trailing data after the MessagePack value")
	}
	return nil
}

// Marshal encodes v as JSON or as MessagePack (a map with the JSON field names).
func Marshal(v any, asJSON bool) ([]byte, error) {
	if asJSON {
		return json.Marshal(v)
	}
	switch v := v.(type) {
	case *Event:
		if v != nil {
			return AppendEvent(nil, v), nil
		}
	case *Batch:
		if v != nil {
			return AppendBatch(make([]byte, 0, 16+64*len(v.Events)), v), nil
		}
	case *HopBatch:
		if v != nil {
			return AppendHopBatch(make([]byte, 0, 32+64*len(v.Events)), v), nil
		}
	case *Change:
		if v != nil {
			return AppendChange(make([]byte, 0, v.Size()), v), nil
		}
	case GetRequest:
		return Marshal(&v, false)
	case *GetRequest:
		if v != nil {
			return AppendGetRequest(make([]byte, 0, 32+9*len(v.IDs)), v), nil
		}
	case GetReply:
		return Marshal(&v, false)
	case *GetReply:
		if v != nil {
			return AppendGetReply(make([]byte, 0, v.Size()), v), nil
		}
	case UnreadRequest:
		return Marshal(&v, false)
	case *UnreadRequest:
		if v != nil {
			return AppendUnreadRequest(make([]byte, 0, 16+9*len(v.UIDs)), v), nil
		}
	case UnreadReply:
		return Marshal(&v, false)
	case *UnreadReply:
		if v != nil {
			return AppendUnreadReply(make([]byte, 0, 128+96*len(v.Users)+len(v.Error)+len(v.Code)), v), nil
		}
	}
	var buf bytes.Buffer
	e := msgpack.NewEncoder(&buf)
	e.SetCustomStructTag("json")
	e.SetOmitEmpty(true)
	if err := e.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// BadEvent is one event of a batch that failed validation; the rest of the batch stands.
type BadEvent struct {
	Index int
	Event Event
	Err   error
}

// DecodeEvents decodes the payload of a message on tally.ev.<typ>.<key>: one event, or a
// batch when typ is "batch". A single event takes its type from the subject (a type in
// the body must agree) and an invalid one is an error. A batch that decodes yields its
// valid events and, separately, each invalid one with the reason, so one bad event does
// not take its neighbours down with it. Errors wrap ErrBadEvent.
func DecodeEvents(typ string, data []byte, h nats.Header, fams Families) ([]Event, []BadEvent, error) {
	d := EventDecoder{Families: fams}
	return d.Decode(typ, data, h)
}

// EventDecoder decodes as DecodeEvents does, a batch into room of its own that each
// Decode reuses: what it returns is good until its next Decode. A batch of 1 000 events
// takes ~170 KiB, which a slice of its own made a large allocation, cleared, for every
// batch a stage read. An EventDecoder is not safe for concurrent use.
type EventDecoder struct {
	Families Families
	room     []Event // its first used events read over by the last batch
	used     int
}

// maxRoom is the most events an EventDecoder keeps room for: larger batches, rare,
// decode into a slice of their own.
const maxRoom = 2048

// keep takes evs, read into the room (or into a slice of their own, past maxRoom) by a
// decode that ended with err (nil: it succeeded), as the room the next decode clears
// and reads into.
func (d *EventDecoder) keep(evs []Event, err error) {
	switch c := cap(evs); {
	case c > maxRoom: // the room may have been read over before the batch outgrew it
		d.room, d.used = nil, 0
	case err != nil: // read over as far as the error, maybe past the events kept
		d.room, d.used = evs[:c], c
	default:
		d.room, d.used = evs[:c], len(evs)
	}
}

// DecodeHop is DecodeHopBatch into the decoder's room: the batch's events are good
// until its next Decode or DecodeHop. A hop batch carries up to 2 000 events.
func (d *EventDecoder) DecodeHop(data []byte) (*HopBatch, error) {
	clear(d.room[:d.used])
	b := &HopBatch{Events: d.room[:0]}
	err := fmt.Errorf("empty payload")
	if len(data) > 0 {
		r := mpReader{b: data}
		err = r.done(r.readHopBatch(b, true))
	}
	d.keep(b.Events, err)
	if err != nil {
		return nil, fmt.Errorf("%w: cannot decode hop batch: %w", ErrBadEvent, err)
	}
	if b.Seq == 0 {
		return nil, fmt.Errorf("%w: hop batch without a sequence", ErrBadEvent)
	}
	for i := range b.Events {
		if err := b.Events[i].ValidateInternal(d.Families); err != nil {
			return nil, fmt.Errorf("hop batch event %d: %w", i, err)
		}
	}
	return b, nil
}

// Decode is DecodeEvents with the decoder's families and room.
func (d *EventDecoder) Decode(typ string, data []byte, h nats.Header) ([]Event, []BadEvent, error) {
	fams := d.Families
	asJSON := IsJSON(data, h)
	if typ == TypeBatch || typ == TypeAdminBatch {
		// Read over zero events, as into a slice of its own.
		clear(d.room[:d.used])
		b := Batch{Events: d.room[:0]}
		err := fmt.Errorf("empty payload")
		switch {
		case len(data) == 0:
		case asJSON:
			err = decodeBatchJSON(data, &b, MaxBatch)
		default:
			r := mpReader{b: data}
			err = r.done(r.readBatch(&b, true))
		}
		d.keep(b.Events, err)
		switch {
		case errors.Is(err, errBatchSize):
			return nil, nil, fmt.Errorf("%w: %w, at most %d", ErrBadEvent, err, MaxBatch)
		case err != nil:
			return nil, nil, fmt.Errorf("%w: cannot decode batch: %w", ErrBadEvent, err)
		case len(b.Events) == 0:
			return nil, nil, fmt.Errorf("%w: empty batch", ErrBadEvent)
		}
		// The good events are kept in place: the bad ones are few, and rarely any. An
		// event is validated where it lies and moved only past a bad one: a batch's
		// events copied one by one took a sixth of the event stage's CPU for views.
		var bad []BadEvent
		good := 0
		for i := range b.Events {
			e := &b.Events[i]
			if typ == TypeBatch && e.Privileged() {
				bad = append(bad, BadEvent{Index: i, Event: *e, Err: fmt.Errorf("%w: batch event %d: a %s event needs the admin grant: publish it on its own subject or in a %s batch", ErrBadEvent, i, e.Type, TypeAdminBatch)})
				continue
			}
			if err := e.Validate(fams); err != nil {
				bad = append(bad, BadEvent{Index: i, Event: *e, Err: fmt.Errorf("batch event %d: %w", i, err)})
				continue
			}
			if good < i {
				b.Events[good] = *e
			}
			good++
		}
		return b.Events[:good], bad, nil
	}
	if !ValidType(typ) {
		return nil, nil, fmt.Errorf("%w: unknown type %q in subject", ErrBadEvent, typ)
	}
	var e Event
	if err := Unmarshal(data, asJSON, &e); err != nil {
		return nil, nil, fmt.Errorf("%w: cannot decode %s event: %w", ErrBadEvent, typ, err)
	}
	if e.Type != "" && e.Type != typ {
		return nil, nil, fmt.Errorf("%w: body type %q differs from subject type %q", ErrBadEvent, e.Type, typ)
	}
	e.Type = typ
	if err := e.Validate(fams); err != nil {
		return nil, nil, err
	}
	return []Event{e}, nil, nil
}
