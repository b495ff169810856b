package pipeline_test

import (
	"errors"
	"testing"

	"github.com/tally-dev/tally/pipeline"
)

func FuzzDecodeEvent(f *testing.F) {
	f.Add("like", []byte(`{"uid":7,"post":9}`))
	f.Add("batch", []byte(`{"events":[{"type":"view","post":1,"n":2}]}`))
	f.Add("view", []byte{0x81, 0xa4, 'p', 'o', 's', 't', 0x07})
	f.Add("batch", []byte{0x81, 0xa6, 'e', 'v', 'e', 'n', 't', 's', 0xdd, 0xff, 0xff, 0xff, 0xff})
	fams := pipeline.Families(pipeline.DefaultFamilies())
	f.Fuzz(func(t *testing.T, typ string, data []byte) {
		evs, bad, err := pipeline.DecodeEvents(typ, data, nil, fams)
		if err != nil {
			if !errors.Is(err, pipeline.ErrBadEvent) {
				t.Fatalf("error does not wrap ErrBadEvent: %v", err)
			}
			return
		}
		for _, b := range bad {
			if !errors.Is(b.Err, pipeline.ErrBadEvent) || b.Event.Validate(fams) == nil {
				t.Fatalf("bad event %d: %v", b.Index, b.Err)
			}
		}
		for _, e := range evs {
			if err := e.Validate(fams); err != nil {
				t.Fatalf("decoded event fails validation: %v", err)
			}
		}
	})
}

func FuzzDecodeDeltaBatch(f *testing.F) {
	f.Add(pipeline.AppendDeltaBatch(nil, &pipeline.DeltaBatch{Source: 1, Seq: 2, Deltas: []pipeline.Delta{{ID: 3, N: 4}}}))
	f.Add([]byte{0x93, 0x01, 0x02, 0xdd, 0x7f, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		var b pipeline.DeltaBatch
		if err := pipeline.DecodeDeltaBatch(data, &b); err != nil {
			return
		}
		var again pipeline.DeltaBatch
		if err := pipeline.DecodeDeltaBatch(pipeline.AppendDeltaBatch(nil, &b), &again); err != nil {
			t.Fatalf("re-encoded batch does not decode: %v", err)
		}
	})
}
