package pipeline_test

import (
	"errors"
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
			}
		}
	})
}
