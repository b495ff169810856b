package pipeline_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tally-dev/tally/pipeline"
)

// withField returns data (a JSON object or a MessagePack map) with one more field, as a
// newer tallyd might answer.
func withField(t *testing.T, data []byte, asJSON bool) []byte {
	t.Helper()
	var m map[string]any
	var err error
	if asJSON {
		d := json.NewDecoder(bytes.NewReader(data))
		d.UseNumber() // 64-bit ids stay exact
		err = d.Decode(&m)
	} else {
		err = msgpack.Unmarshal(data, &m)
	}
	if err != nil {
		t.Fatal(err)
	}
	m["added_in_a_later_version"] = map[string]any{"nested": []any{1, "two"}}
	if asJSON {
		data, err = json.Marshal(m)
	} else {
		data, err = msgpack.Marshal(m)
	}
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// Every reply and change event decodes with a field its reader does not know, in JSON
// and in MessagePack, to what it held without it; a request does not (a typo there is
// the sender's mistake, and the server says which field).
func TestReplyToleratesUnknownFields(t *testing.T) {
	f := func(t *testing.T, v any) {
		t.Helper()
		for _, asJSON := range []bool{false, true} {
			p := reflect.New(reflect.TypeOf(v)) // Change encodes from a pointer
			p.Elem().Set(reflect.ValueOf(v))
			data, err := pipeline.Marshal(p.Interface(), asJSON)
			if err != nil {
				t.Fatal(err)
			}
			data = withField(t, data, asJSON)
			got := reflect.New(reflect.TypeOf(v))
			if err := pipeline.UnmarshalReply(data, asJSON, got.Interface()); err != nil {
				t.Fatalf("%T (json %v): %v", v, asJSON, err)
			}
			want := reflect.New(reflect.TypeOf(v))
			clean, _ := pipeline.Marshal(p.Interface(), asJSON)
			if err := pipeline.UnmarshalReply(clean, asJSON, want.Interface()); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Interface(), want.Interface()) {
				t.Errorf("%T (json %v): %+v, want %+v", v, asJSON, got.Elem(), want.Elem())
			}
		}
	}
	f(t, pipeline.GetReply{Fields: []string{"like"}, Counts: [][]uint64{{1}, nil}, Unavailable: []pipeline.ID{1 << 60}})
	f(t, pipeline.GetReply{Error: "unknown family: posts", Code: pipeline.CodeUnknownFamily})
	f(t, pipeline.LikedReply{Liked: []bool{true, false}})
	f(t, pipeline.ListReply{IDs: []any{uint64(5)}, TS: []int64{1000}, Next: "c"})
	f(t, pipeline.UnreadReply{Unread: pipeline.Unread{Like: 2}})
	f(t, pipeline.UnreadReply{Users: []pipeline.Unread{{DM: 1}}})
	f(t, pipeline.HealthReply{OK: true, Ready: true, Partitions: 4, Version: pipeline.ProtocolVersion})
	f(t, pipeline.AuditReply{Checked: 2, Drift: []pipeline.Drift{{Family: "post", ID: 1}}})
	f(t, pipeline.Change{IDs: []pipeline.ID{1, 1 << 63}, Fields: []string{"like"}, Counts: [][]uint64{{1}, {2}}})

	data := withField(t, []byte(`{"ids":[1]}`), true)
	if err := pipeline.Unmarshal(data, true, &pipeline.GetRequest{}); err == nil || !strings.Contains(err.Error(), "unknown field") {
		t.Errorf("a request with an unknown field: %v, want an unknown field error", err)
	}
}
