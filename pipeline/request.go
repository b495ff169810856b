package pipeline

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/vmihailenco/msgpack/v5"
)

// DecodeRequest decodes the request of a query subject into v (a pointer to one of the
// request structs) as Unmarshal does. A request that does not decode is an
// ErrBadRequest whose text says what is wrong in the contract's words — which field,
// and what it must be — rather than in Go's ("cannot unmarshal string into Go struct
// field GetRequest.ids of type []pipeline.ID"): whoever reads it wrote JSON or
// MessagePack, not Go.
func DecodeRequest(data []byte, asJSON bool, v any) error {
	return decodeRequest(data, asJSON, v, true)
}

// DecodePeerRequest decodes a request one tallyd sends another (the part and standby
// subjects) as DecodeRequest does, except that a field it does not know is skipped, as
// UnmarshalReply skips one in a reply: in a rolling upgrade the tallyd already upgraded
// may send a field the others do not know yet, and they must still answer it. A typo
// cannot hide here: both ends are Tally's code.
func DecodePeerRequest(data []byte, asJSON bool, v any) error {
	return decodeRequest(data, asJSON, v, false)
}

func decodeRequest(data []byte, asJSON bool, v any, strict bool) error {
	err := unmarshal(data, asJSON, v, strict)
	if err == nil {
		return nil
	}
	t := reflect.TypeOf(v)
	if t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	return fmt.Errorf("%w: %s", ErrBadRequest, explainRequest(data, asJSON, t.Elem(), err, strict))
}

// explainRequest says why data is not a request of type t, unmarshal having failed with
// err. It runs on failures only: it decodes the payload again, field by field, to find
// the first one at fault (in the order of their names); unknown fields are at fault only
// when strict.
func explainRequest(data []byte, asJSON bool, t reflect.Type, err error, strict bool) string {
	form := "a MessagePack map"
	if asJSON {
		form = "a JSON object"
	}
	raw := map[string][]byte{}
	switch {
	case len(data) == 0:
		return "empty payload: the request must be " + form
	case asJSON:
		var m map[string]json.RawMessage
		if e := json.Unmarshal(data, &m); e != nil {
			var syntax *json.SyntaxError
			switch {
			case errors.Is(err, errTrailingJSON):
				return err.Error()
			case errors.As(e, &syntax):
				return "the request is not valid JSON: " + e.Error()
			}
			return "the request must be " + form
		}
		for k, v := range m {
			raw[k] = v
		}
	default:
		if e := checkMsgpack(data); e != nil {
			return "the request is not valid MessagePack: " + e.Error()
		}
		var m map[string]msgpack.RawMessage
		if msgpack.Unmarshal(data, &m) != nil {
			return "the request must be " + form + " with string keys"
		}
		for k, v := range m {
			raw[k] = v
		}
	}
	names := requestFields(t)
	for _, key := range slices.Sorted(maps.Keys(raw)) {
		i := slices.IndexFunc(names, func(n string) bool { return n == key || asJSON && strings.EqualFold(n, key) })
		if i < 0 && !strict {
			continue
		} else if i < 0 {
			return fmt.Sprintf("unknown field %q: this request has %s", key, quoted(names))
		}
		f := t.Field(i)
		if e := Unmarshal(raw[key], asJSON, reflect.New(f.Type).Interface()); e != nil {
			msg := fmt.Sprintf("%q must be %s", names[i], describe(f.Type))
			if bad := (*idError)(nil); errors.As(e, &bad) {
				msg += ": " + bad.Error()
			}
			return msg
		}
	}
	return err.Error()
}

// requestFields is the wire name of each field of t, in field order.
func requestFields(t reflect.Type) []string {
	names := make([]string, t.NumField())
	for i := range names {
		names[i], _, _ = strings.Cut(t.Field(i).Tag.Get("json"), ",")
	}
	return names
}

func quoted(names []string) string {
	if len(names) == 0 {
		return "no fields"
	}
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}

var idType = reflect.TypeFor[ID]()

// describe names what a value of type t is on the wire.
func describe(t reflect.Type) string {
	switch {
	case t == idType:
		return "an unsigned 64-bit integer (a number or a decimal string)"
	case t.Kind() == reflect.Slice:
		return "an array of " + plural(t.Elem())
	case t.Kind() == reflect.String:
		return "a string"
	case t.Kind() == reflect.Bool:
		return "true or false"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Int64:
		return "an integer"
	case t.Kind() >= reflect.Uint && t.Kind() <= reflect.Uint64:
		return "an unsigned integer"
	}
	return "a " + t.Kind().String()
}

func plural(t reflect.Type) string {
	switch {
	case t == idType:
		return "unsigned 64-bit integers (numbers or decimal strings)"
	case t.Kind() == reflect.String:
		return "strings"
	case t.Kind() == reflect.Bool:
		return "booleans"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Int64:
		return "integers"
	case t.Kind() >= reflect.Uint && t.Kind() <= reflect.Uint64:
		return "unsigned integers"
	}
	return "values"
}
