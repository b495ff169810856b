package pipeline

import (
	"bytes"
	"fmt"
	"math"
	"unicode/utf8"
)

// Producers in other languages send JSON, so an Event and a Batch read their JSON form
// themselves, in one pass over the bytes and without reflection. They accept what
// encoding/json (with DisallowUnknownFields, the value alone in the payload) accepted and
// make the same values of it (TestJSONMatchesEncodingJSON, FuzzJSONEvent, FuzzJSONBatch):
//
//   - a field name matches exactly, else without regard to case as encoding/json folds
//     it ("UID", "Uid"; Unicode simple folding, so "ſeq" is seq); any other is an error;
//   - ids are JSON numbers or decimal strings within uint64, nothing else (no sign,
//     fraction, exponent, escape or space; null is an error);
//   - n and ts are integers within int64, seq within uint64, local a bool;
//   - null leaves a string, number or bool field (or a list element) as it was, and
//     makes kinds or events nil; top-level null leaves the whole value as it was;
//   - a field given twice: the last value wins; a list given twice is read over the
//     elements of the first, as encoding/json does (an event of the first list merged
//     with the event at its place in the second);
//   - escapes as in JSON; invalid UTF-8 and lone surrogates become U+FFFD.
//
// One difference, on purpose: anything but white space after the value is an error.
// encoding/json's Decoder.More, which the old check used, let a payload end in a stray
// "]" or "}" ({"uid":1,"post":2}}), contrary to the check's own message.

// jsonDecoder reads one payload. event and field say where it is, for errors.
type jsonDecoder struct {
	data  []byte
	pos   int
	event int    // the batch event being read, -1 outside one
	field string // the field being read, "" outside one
}

// decodeEventJSON decodes a JSON event into e, over what e holds (as encoding/json does).
func decodeEventJSON(data []byte, e *Event) error {
	d := jsonDecoder{data: data, event: -1}
	d.space()
	var err error
	switch d.peek() {
	case '{':
		err = d.object(func(key []byte) error { return d.eventField(e, key) })
	case 'n':
		err = d.literal("null")
	default:
		err = d.wrongType("an event object")
	}
	if err != nil {
		return err
	}
	return d.end()
}

// decodeBatchJSON decodes a JSON batch into b, over what b holds. More than limit events
// are an error, found before they are all read (no limit when limit < 0).
func decodeBatchJSON(data []byte, b *Batch, limit int) error {
	d := jsonDecoder{data: data, event: -1}
	d.space()
	var err error
	switch d.peek() {
	case '{':
		err = d.object(func(key []byte) error {
			if matchField(key, batchFields) == "" {
				return d.errorf("unknown field %q", key)
			}
			d.field = "events"
			err := d.events(b, limit)
			d.field = ""
			return err
		})
	case 'n':
		err = d.literal("null")
	default:
		err = d.wrongType("a batch object")
	}
	if err != nil {
		return err
	}
	return d.end()
}

func (d *jsonDecoder) errorf(format string, args ...any) error {
	where := ""
	if d.event >= 0 {
		where = fmt.Sprintf("event %d: ", d.event)
	}
	if d.field != "" {
		where += fmt.Sprintf("field %q: ", d.field)
	}
	return fmt.Errorf("json: "+where+format, args...)
}

// syntax reports what is at d.pos where want was expected.
func (d *jsonDecoder) syntax(want string) error {
	if d.pos >= len(d.data) {
		return d.errorf("unexpected end of input, want %s", want)
	}
	c := d.data[d.pos]
	if c < 0x20 || c >= utf8.RuneSelf {
		return d.errorf("invalid byte 0x%02x at offset %d, want %s", c, d.pos, want)
	}
	return d.errorf("invalid character %q at offset %d, want %s", c, d.pos, want)
}

// wrongType reports the value at d.pos, of another type than want.
func (d *jsonDecoder) wrongType(want string) error {
	var got string
	switch d.peek() {
	case '{':
		got = "an object"
	case '[':
		got = "a list"
	case '"':
		got = "a string"
	case 't', 'f':
		got = "a bool"
	case 'n':
		got = "null"
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		got = "a number"
	default:
		return d.syntax(want)
	}
	return d.errorf("%s at offset %d, want %s", got, d.pos, want)
}

func (d *jsonDecoder) peek() byte {
	if d.pos < len(d.data) {
		return d.data[d.pos]
	}
	return 0
}

// space skips white space as JSON defines it.
func (d *jsonDecoder) space() {
	for d.pos < len(d.data) {
		switch d.data[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

// end checks that nothing but white space follows the value.
func (d *jsonDecoder) end() error {
	d.space()
	if d.pos < len(d.data) {
		return fmt.Errorf("trailing data after the JSON object at offset %d", d.pos)
	}
	return nil
}

func (d *jsonDecoder) literal(word string) error {
	for i := range len(word) {
		if d.pos >= len(d.data) || d.data[d.pos] != word[i] {
			return d.syntax(fmt.Sprintf("%q", word))
		}
		d.pos++
	}
	return nil
}

// object reads the object at d.pos, calling field with each key (unquoted, valid until
// the next read) and d.pos at its value.
func (d *jsonDecoder) object(field func(key []byte) error) error {
	d.pos++ // {
	d.space()
	if d.peek() == '}' {
		d.pos++
		return nil
	}
	for {
		if d.peek() != '"' {
			return d.syntax("a field name")
		}
		key, _, err := d.str()
		if err != nil {
			return err
		}
		d.space()
		if d.peek() != ':' {
			return d.syntax("':' after a field name")
		}
		d.pos++
		d.space()
		if err := field(key); err != nil {
			return err
		}
		d.space()
		switch d.peek() {
		case ',':
			d.pos++
			d.space()
		case '}':
			d.pos++
			return nil
		default:
			return d.syntax("',' or '}' after a field")
		}
	}
}

// list reads the list at d.pos, calling elem with the index of each element and d.pos
// at it; it returns how many there were.
func (d *jsonDecoder) list(elem func(i int) error) (int, error) {
	d.pos++ // [
	d.space()
	if d.peek() == ']' {
		d.pos++
		return 0, nil
	}
	for i := 0; ; i++ {
		if err := elem(i); err != nil {
			return 0, err
		}
		d.space()
		switch d.peek() {
		case ',':
			d.pos++
			d.space()
		case ']':
			d.pos++
			return i + 1, nil
		default:
			return 0, d.syntax("',' or ']' after a list element")
		}
	}
}

// events reads the events field of a batch: a list of events or null.
func (d *jsonDecoder) events(b *Batch, limit int) error {
	switch d.peek() {
	case 'n':
		b.Events = nil
		return d.literal("null")
	case '[':
	default:
		return d.wrongType("a list of events")
	}
	evs := b.Events[:0]
	if cap(evs) == 0 {
		// Sized once: every event opens a brace, and few strings hold one.
		evs = make([]Event, 0, min(bytes.Count(d.data[d.pos:], []byte{'{'}), MaxBatch))
	}
	n, err := d.list(func(i int) error {
		if limit >= 0 && i >= limit {
			return errBatchSize
		}
		// As encoding/json: read over what the list held at i before, or a zero event.
		if i < cap(evs) {
			evs = evs[:i+1]
		} else {
			evs = append(evs, Event{})
		}
		d.event, d.field = i, ""
		switch d.peek() {
		case '{':
			e := &evs[i]
			return d.object(func(key []byte) error { return d.eventField(e, key) })
		case 'n':
			return d.literal("null")
		}
		return d.wrongType("an event object")
	})
	if err != nil {
		return err
	}
	d.event, d.field = -1, "events"
	if n == 0 {
		b.Events = []Event{}
	} else {
		b.Events = evs[:n]
	}
	return nil
}

// Field names and their case-folded forms (see appendFoldedName).
var (
	eventFieldsFolded = [][2]string{{"type", "TYPE"}, {"tx", "TX"}, {"uid", "UID"}, {"post", "POST"},
		{"owner", "OWNER"}, {"target", "TARGET"}, {"comment", "COMMENT"}, {"family", "FAMILY"}, {"id", "ID"},
		{"field", "FIELD"}, {"n", "N"}, {"kinds", "KINDS"}, {"ts", "TS"}, {"local", "LOCAL"}, {"seq", "SEQ"}}
	batchFields = [][2]string{{"events", "EVENTS"}}
)

// matchField returns the field key names, exactly or else as encoding/json folds case,
// or "" for none.
func matchField(key []byte, fields [][2]string) string {
	for _, f := range fields {
		if string(key) == f[0] {
			return f[0]
		}
	}
	var buf [32]byte
	folded := appendFoldedName(buf[:0], key)
	for _, f := range fields {
		if string(folded) == f[1] {
			return f[0]
		}
	}
	return ""
}

// eventFieldName is matchField for Event, the common spellings without a loop.
func eventFieldName(key []byte) string {
	switch string(key) {
	case "type":
		return "type"
	case "uid":
		return "uid"
	case "post":
		return "post"
	case "owner":
		return "owner"
	case "n":
		return "n"
	case "tx":
		return "tx"
	case "ts":
		return "ts"
	}
	return matchField(key, eventFieldsFolded)
}

// eventField reads the value of field key into e.
func (d *jsonDecoder) eventField(e *Event, key []byte) error {
	name := eventFieldName(key)
	if name == "" {
		return d.errorf("unknown field %q", key)
	}
	d.field = name
	var err error
	switch name {
	case "type":
		err = d.string(&e.Type, true)
	case "tx":
		err = d.string(&e.Tx, false)
	case "uid":
		err = d.id(&e.UID)
	case "post":
		err = d.id(&e.Post)
	case "owner":
		err = d.id(&e.Owner)
	case "target":
		err = d.id(&e.Target)
	case "comment":
		err = d.id(&e.Comment)
	case "family":
		err = d.string(&e.Family, false)
	case "id":
		err = d.id(&e.ID)
	case "field":
		err = d.string(&e.Field, false)
	case "n":
		err = d.int(&e.N)
	case "kinds":
		err = d.kinds(e)
	case "ts":
		err = d.int(&e.TS)
	case "local":
		err = d.bool(&e.Local)
	case "seq":
		err = d.uint(&e.Seq)
	}
	d.field = ""
	return err
}

// string reads a string into dst; null leaves dst as it was. An event type is one of
// the type constants when it is one.
func (d *jsonDecoder) string(dst *string, isType bool) error {
	switch d.peek() {
	case '"':
		s, _, err := d.str()
		if err != nil {
			return err
		}
		if isType {
			for _, t := range commonTypes {
				if string(s) == t {
					*dst = t
					return nil
				}
			}
		}
		*dst = string(s)
		return nil
	case 'n':
		return d.literal("null")
	}
	return d.wrongType("a string")
}

// id reads an id as ID.UnmarshalJSON did: the digits of a number or of a string as sent.
func (d *jsonDecoder) id(dst *ID) error {
	var text []byte
	var err error
	switch c := d.peek(); {
	case c == '"':
		_, text, err = d.str()
	case c == '-' || '0' <= c && c <= '9':
		text, err = d.number()
	case c == 'n':
		text, err = []byte("null"), d.literal("null")
	case c == 't':
		text, err = []byte("true"), d.literal("true")
	case c == 'f':
		text, err = []byte("false"), d.literal("false")
	default:
		return d.wrongType("an id (a number or a decimal string)")
	}
	if err != nil {
		return err
	}
	v, ok := parseUint(text)
	if !ok {
		_, err := ParseID(string(text))
		return d.errorf("%w", err)
	}
	*dst = ID(v)
	return nil
}

// int reads an integer within int64 into dst; null leaves dst as it was.
func (d *jsonDecoder) int(dst *int64) error {
	switch c := d.peek(); {
	case c == 'n':
		return d.literal("null")
	case c != '-' && (c < '0' || c > '9'):
		return d.wrongType("an integer")
	}
	text, err := d.number()
	if err != nil {
		return err
	}
	neg, digits := text[0] == '-', text
	if neg {
		digits = text[1:]
	}
	v, ok := parseUint(digits)
	switch {
	case !ok || !neg && v > math.MaxInt64 || neg && v > 1<<63:
		return d.errorf("%s is not an integer within int64", text)
	case neg:
		*dst = -int64(v)
	default:
		*dst = int64(v)
	}
	return nil
}

// uint reads an unsigned integer within uint64 into dst; null leaves dst as it was.
func (d *jsonDecoder) uint(dst *uint64) error {
	switch c := d.peek(); {
	case c == 'n':
		return d.literal("null")
	case c != '-' && (c < '0' || c > '9'):
		return d.wrongType("an unsigned integer")
	}
	text, err := d.number()
	if err != nil {
		return err
	}
	v, ok := parseUint(text)
	if !ok {
		return d.errorf("%s is not an integer within uint64", text)
	}
	*dst = v
	return nil
}

// bool reads true or false into dst; null leaves dst as it was.
func (d *jsonDecoder) bool(dst *bool) error {
	switch d.peek() {
	case 't':
		*dst = true
		return d.literal("true")
	case 'f':
		*dst = false
		return d.literal("false")
	case 'n':
		return d.literal("null")
	}
	return d.wrongType("true or false")
}

// kinds reads a list of strings or null into e.Kinds.
func (d *jsonDecoder) kinds(e *Event) error {
	switch d.peek() {
	case 'n':
		e.Kinds = nil
		return d.literal("null")
	case '[':
	default:
		return d.wrongType("a list of strings")
	}
	ks := e.Kinds[:0]
	n, err := d.list(func(i int) error {
		// As encoding/json: read over what the list held at i before, or "".
		if i < cap(ks) {
			ks = ks[:i+1]
		} else {
			ks = append(ks, "")
		}
		return d.string(&ks[i], false)
	})
	if err != nil {
		return err
	}
	if n == 0 {
		e.Kinds = []string{}
	} else {
		e.Kinds = ks[:n]
	}
	return nil
}
