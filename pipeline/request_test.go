package pipeline_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/tally-dev/tally/pipeline"
)

// FuzzDecodeRequest: no payload panics the request decoder or its explanation, and every
// payload it refuses is a bad request.
func FuzzDecodeRequest(f *testing.F) {
	for _, seed := range []string{`{"ids":[1,"2"]}`, `{"ids":"1"}`, `{"uid":1,"limit":"x"}`, `[1]`, `{"ids":[1]} 2`,
		"\x81\xa3ids\x91\x01", "\x81\xa3ids\xa21x", "\x81\x01\x02", "\xc1"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, asJSON := range []bool{true, false} {
			for _, v := range []any{&pipeline.GetRequest{}, &pipeline.ListRequest{}, &pipeline.UnreadRequest{}, &pipeline.AuditRequest{}} {
				if err := pipeline.DecodeRequest(data, asJSON, v); err != nil && !errors.Is(err, pipeline.ErrBadRequest) {
					t.Fatalf("%q (json %v) into %T: %v, not a bad request", data, asJSON, v, err)
				}
				if err := pipeline.DecodePeerRequest(data, asJSON, v); err != nil && !errors.Is(err, pipeline.ErrBadRequest) {
					t.Fatalf("%q (json %v) into %T from a peer: %v, not a bad request", data, asJSON, v, err)
				}
			}
		}
	})
}

// A peer's request skips the fields it does not know, which a client's names; a field it
// knows with a wrong value is explained alike.
func TestDecodePeerRequest(t *testing.T) {
	f := func(t *testing.T, data string, wantIDs []pipeline.ID, wantErr, wantClientErr string) {
		t.Helper()
		var r pipeline.GetRequest
		err := pipeline.DecodePeerRequest([]byte(data), true, &r)
		if got := fmt.Sprint(err); err != nil && got != wantErr || err == nil && (wantErr != "" || !slices.Equal(r.IDs, wantIDs)) {
			t.Errorf("peer %s: %v %v, want %v %q", data, r.IDs, err, wantIDs, wantErr)
		}
		if err := pipeline.DecodeRequest([]byte(data), true, &pipeline.GetRequest{}); fmt.Sprint(err) != wantClientErr {
			t.Errorf("client %s: %v, want %q", data, err, wantClientErr)
		}
	}
	f(t, `{"ids":[1,"2"],"later":{"x":[1]}}`, []pipeline.ID{1, 2}, "",
		`bad request: unknown field "later": this request has "ids", "exact", "window"`)
	const ids = `bad request: "ids" must be an array of unsigned 64-bit integers (numbers or decimal strings)`
	f(t, `{"a_later":1,"ids":"x"}`, nil, ids, `bad request: unknown field "a_later": this request has "ids", "exact", "window"`)
	f(t, `{"ids":[1]}`, []pipeline.ID{1}, "", "<nil>")
}
