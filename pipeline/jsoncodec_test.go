package pipeline

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// jsonReference is how JSON events were decoded before their own codec: encoding/json
// with DisallowUnknownFields, then nothing but white space (see jsoncodec.go for the one
// difference from the old check, a stray ] or } at the end).
func jsonReference(data []byte, v any) error {
	if len(data) == 0 {
		return errors.New("empty payload")
	}
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	if len(bytes.TrimLeft(data[d.InputOffset():], " \t\r\n")) > 0 {
		return errors.New("trailing data")
	}
	return nil
}

// checkJSONEvent decodes data as an event with the codec and with encoding/json, and
// fails unless both accept it and make the same event, or both reject it.
func checkJSONEvent(t *testing.T, data []byte) (Event, error) {
	t.Helper()
	var got, want Event
	err, errRef := Unmarshal(data, true, &got), jsonReference(data, &want)
	if (err == nil) != (errRef == nil) || err == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: codec %#v (%v), encoding/json %#v (%v)", data, got, err, want, errRef)
	}
	return got, err
}

func checkJSONBatch(t *testing.T, data []byte) (Batch, error) {
	t.Helper()
	var got, want Batch
	err, errRef := Unmarshal(data, true, &got), jsonReference(data, &want)
	if (err == nil) != (errRef == nil) || err == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: codec %#v (%v), encoding/json %#v (%v)", data, got, err, want, errRef)
	}
	return got, err
}

// TestJSONMatchesEncodingJSON: the JSON codec accepts what encoding/json accepts, makes
// the same events of it, and rejects the rest, with a message saying what and where.
func TestJSONMatchesEncodingJSON(t *testing.T) {
	f := func(in string, want Event, wantErr string) {
		t.Helper()
		got, err := checkJSONEvent(t, []byte(in))
		switch {
		case wantErr == "" && err != nil:
			t.Fatalf("%s: %v", in, err)
		case wantErr == "" && !reflect.DeepEqual(got, want):
			t.Fatalf("%s: %#v, want %#v", in, got, want)
		case wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr)):
			t.Fatalf("%s: error %v, want one saying %q", in, err, wantErr)
		}
	}
	like := Event{Type: "like", UID: 7, Post: 9}
	f(`{"type":"like","uid":7,"post":9}`, like, "")
	f(" \t\r\n{ \"type\" : \"like\" ,\n\"uid\":7 , \"post\" : 9 } \n", like, "")
	f(`{"type":"like","uid":"7","post":"9"}`, like, "")
	f(`{"uid":18446744073709551615,"post":"00000000000000000000009"}`, Event{UID: 1<<64 - 1, Post: 9}, "")
	f(`{}`, Event{}, "")
	f(`null`, Event{}, "")
	// Names without regard to case, as encoding/json folds them.
	f(`{"TYPE":"like","Uid":7,"pOST":9}`, like, "")
	f(`{"ſeq":5,"\u212Ainds":["a"]}`, Event{Seq: 5, Kinds: []string{"a"}}, "") // long s, Kelvin sign
	f(`{"u\u0069d":7}`, Event{UID: 7}, "")
	// The last of a field given twice wins; null leaves a value as it was.
	f(`{"uid":1,"uid":2,"type":"like","type":null,"n":3,"n":null,"local":true,"local":null}`, Event{UID: 2, Type: "like", N: 3, Local: true}, "")
	f(`{"kinds":["a","b"],"kinds":[null]}`, Event{Kinds: []string{"a"}}, "")
	f(`{"kinds":["a","b"],"kinds":[]}`, Event{Kinds: []string{}}, "")
	f(`{"kinds":["a"],"kinds":null}`, Event{}, "")
	f(`{"n":-0,"ts":-9223372036854775808,"seq":18446744073709551615}`, Event{TS: -1 << 63, Seq: 1<<64 - 1}, "")
	// Escapes; invalid UTF-8 and lone surrogates become U+FFFD.
	f(`{"tx":"a\"b\\c\/d\b\f\n\r\t\u00e9\ud83d\ude00"}`, Event{Tx: "a\"b\\c/d\b\f\n\r\t\u00e9\U0001F600"}, "")
	f("{\"tx\":\"\xff\xc3(\\ud800x\\ud800\\u0041\"}", Event{Tx: "\ufffd\ufffd(\ufffdx\ufffdA"}, "")
	f(`{"tx":"é"}`, Event{Tx: "é"}, "")

	f(`{"uid":7,"psot":9}`, Event{}, `unknown field "psot"`)
	f(`{"uid":-7}`, Event{}, `field "uid": id "-7" is not an unsigned`)
	f(`{"uid":7.0}`, Event{}, "not an unsigned")
	f(`{"uid":1e3}`, Event{}, "not an unsigned")
	f(`{"uid":"18446744073709551616"}`, Event{}, "not an unsigned")
	f(`{"uid":"\u0037"}`, Event{}, "not an unsigned")
	f(`{"uid":" 7"}`, Event{}, "not an unsigned")
	f(`{"uid":""}`, Event{}, "not an unsigned")
	f(`{"uid":null}`, Event{}, `id "null" is not`)
	f(`{"uid":true}`, Event{}, "not an unsigned")
	f(`{"uid":[7]}`, Event{}, "a list")
	f(`{"uid":{}}`, Event{}, "an object")
	f(`{"n":"5"}`, Event{}, `field "n": a string`)
	f(`{"n":1.5}`, Event{}, "not an integer")
	f(`{"n":9223372036854775808}`, Event{}, "within int64")
	f(`{"seq":-1}`, Event{}, "within uint64")
	f(`{"local":1}`, Event{}, "want true or false")
	f(`{"local":"true"}`, Event{}, "a string")
	f(`{"type":7}`, Event{}, "a number")
	f(`{"kinds":"like"}`, Event{}, "a string")
	f(`{"kinds":[7]}`, Event{}, "a number")
	f(`{"uid":7} x`, Event{}, "trailing data")
	f(`{"uid":7}{"uid":8}`, Event{}, "trailing data")
	f(`{"uid":7}}`, Event{}, "trailing data") // encoding/json's Decoder.More took it for the end
	f(`{"uid":7}]`, Event{}, "trailing data")
	f(``, Event{}, "empty payload")
	f(` `, Event{}, "unexpected end")
	f(`[]`, Event{}, "a list")
	f(`"like"`, Event{}, "a string")
	f(`{"uid":7`, Event{}, "unexpected end")
	f(`{"uid":7,}`, Event{}, "want a field name")
	f(`{"uid" 7}`, Event{}, "':'")
	f(`{"uid":07}`, Event{}, "invalid character '7'")
	f(`{"uid":-}`, Event{}, "a digit")
	f(`{"n":1.}`, Event{}, "decimal point")
	f(`{"n":1e}`, Event{}, "exponent")
	f(`{"local":tru}`, Event{}, `want "true"`)
	f(`{"tx":"a`, Event{}, "end of a string")
	f("{\"tx\":\"a\nb\"}", Event{}, "control characters")
	f(`{"tx":"\x"}`, Event{}, "an escape")
	f(`{"tx":"\u00g0"}`, Event{}, "hexadecimal")
	f("\xef\xbb\xbf{}", Event{}, "invalid byte 0xef")
	f(`{"kinds":["a",]}`, Event{}, "invalid character ']'")
	f(`{"kinds":["a" "b"]}`, Event{}, "',' or ']'")
}

// TestJSONBatchMatchesEncodingJSON: batches too, with the place of a bad event in the
// error, and a list given twice read over the first as encoding/json does.
func TestJSONBatchMatchesEncodingJSON(t *testing.T) {
	f := func(in string, want Batch, wantErr string) {
		t.Helper()
		got, err := checkJSONBatch(t, []byte(in))
		switch {
		case wantErr == "" && err != nil:
			t.Fatalf("%s: %v", in, err)
		case wantErr == "" && !reflect.DeepEqual(got, want):
			t.Fatalf("%s: %#v, want %#v", in, got, want)
		case wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr)):
			t.Fatalf("%s: error %v, want one saying %q", in, err, wantErr)
		}
	}
	f(`{"events":[{"type":"like","uid":1,"post":2},{"type":"view","post":2,"n":3}]}`,
		Batch{Events: []Event{{Type: "like", UID: 1, Post: 2}, {Type: "view", Post: 2, N: 3}}}, "")
	f(`{"Events":[null,{}]}`, Batch{Events: []Event{{}, {}}}, "")
	f(`{"events":[]}`, Batch{Events: []Event{}}, "")
	f(`{"events":null}`, Batch{}, "")
	f(`{}`, Batch{}, "")
	f(`null`, Batch{}, "")
	f(`{"events":[{"uid":1,"post":5},{"uid":2}],"events":[{"post":3}]}`, Batch{Events: []Event{{UID: 1, Post: 3}}}, "")
	f(`{"events":[{"uid":1},{"uid":2}],"events":[{}],"events":[null,{"n":1}]}`, Batch{Events: []Event{{UID: 1}, {UID: 2, N: 1}}}, "")
	f(`{"events":[{"uid":1}],"events":[],"events":[null]}`, Batch{Events: []Event{{}}}, "")

	f(`{"events":[{"type":"view","post":1},{"type":"view","post":1,"nn":2}]}`, Batch{}, `json: event 1: unknown field "nn"`)
	f(`{"events":[{"type":"view","post":1},{"type":"view","post":"x"}]}`, Batch{}, `json: event 1: field "post": id "x" is not`)
	f(`{"event":[]}`, Batch{}, `unknown field "event"`)
	f(`{"events":{}}`, Batch{}, `field "events": an object`)
	f(`{"events":[1]}`, Batch{}, "event 0: a number")
	f(`{"events":[{},]}`, Batch{}, "invalid character ']'")
	f(`[{"type":"like"}]`, Batch{}, "a list")
	f(`{"events":[{"uid":1}]}}`, Batch{}, "trailing data")
}

// A batch of more than MaxBatch events is refused once it is seen to be one, in JSON
// and in MessagePack, so a payload of many small events does not make a large slice.
func TestBatchLimit(t *testing.T) {
	fams := Families(DefaultFamilies())
	for _, asJSON := range []bool{true, false} {
		for _, n := range []int{MaxBatch, MaxBatch + 1} {
			evs := make([]Event, n)
			for i := range evs {
				evs[i] = Event{Type: TypeView, Post: 1}
			}
			data, err := Marshal(&Batch{Events: evs}, asJSON)
			if err != nil {
				t.Fatal(err)
			}
			good, _, err := DecodeEvents(TypeBatch, data, nil, fams)
			if n == MaxBatch && (err != nil || len(good) != n) {
				t.Fatalf("json %v: a batch of %d: %d events, %v", asJSON, n, len(good), err)
			}
			if n > MaxBatch && (!errors.Is(err, ErrBadEvent) || !strings.Contains(err.Error(), "at most 10000")) {
				t.Fatalf("json %v: a batch of %d: %v", asJSON, n, err)
			}
		}
	}
}

func jsonSeeds() []string {
	return []string{
		`{"type":"like","uid":7,"post":"9","owner":3,"ts":5,"tx":"a"}`,
		`{"type":"incr","family":"post","id":9,"field":"view","n":-2}`,
		`{"type":"read","uid":7,"kinds":["like","DM"],"local":true,"seq":12}`,
		`{"target":1,"comment":2,"TS":3,"ſeq":4}`,
		`{"tx":"a\"\u00e9\ud83d\ude00\ud800","n":null,"kinds":null}`,
		`{"uid":1,"uid":"2"} `,
		`{"uid":7}}`,
		`null`,
		"{\"tx\":\"\xff\"}",
	}
}

// FuzzJSONEvent: the codec and encoding/json accept and reject the same events, and make
// the same of what they accept.
func FuzzJSONEvent(f *testing.F) {
	for _, s := range jsonSeeds() {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkJSONEvent(t, data) })
}

// FuzzJSONBatch is FuzzJSONEvent for batches.
func FuzzJSONBatch(f *testing.F) {
	for _, s := range jsonSeeds() {
		f.Add([]byte(`{"events":[` + s + `,{}]}`))
	}
	f.Add([]byte(`{"events":[{"uid":1},{"uid":2}],"events":[null,{"n":1},{}],"EVENTS":[]}`))
	f.Add([]byte(`{"events":null}`))
	f.Fuzz(func(t *testing.T, data []byte) { checkJSONBatch(t, data) })
}
