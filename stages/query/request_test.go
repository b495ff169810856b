package query_test

import (
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/natstest"
)

// A request that does not decode is answered with what is wrong in the contract's
// words, in the request's own form: the field at fault and what it must be, never Go's
// types. Before: "bad request: json: cannot unmarshal string into Go struct field
// GetRequest.ids of type []pipeline.ID".
func TestBadRequestWords(t *testing.T) {
	s := natstest.Start(t)
	startNode(t, s, openDB(t), 2, 5*time.Second, 0, 1)
	nc := natstest.Connect(t, s)
	mp := func(v map[string]any) string {
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	f := func(subject, body, want string) {
		t.Helper()
		m, err := nc.Request(subject, []byte(body), 10*time.Second)
		if err != nil {
			t.Fatalf("%s %q: %v", subject, body, err)
		}
		var r pipeline.GetReply
		if err := pipeline.UnmarshalReply(m.Data, pipeline.IsJSON([]byte(body), nil), &r); err != nil {
			t.Fatalf("%s %q: reply %q: %v", subject, body, m.Data, err)
		}
		if r.Error != "bad request: "+want || r.Code != pipeline.CodeBadRequest {
			t.Errorf("%s %q:\n got %q (%s)\nwant %q", subject, body, r.Error, r.Code, "bad request: "+want)
		}
	}
	const ids = `"ids" must be an array of unsigned 64-bit integers (numbers or decimal strings)`
	f("tally.get.post", `{"ids":"42"}`, ids)
	f("tally.get.post", mp(map[string]any{"ids": "42"}), ids)
	f("tally.get.post", `{"ids":[1,-1]}`, ids+`: id "-1" is not an unsigned 64-bit decimal number`)
	f("tally.get.post", `{"ids":["18446744073709551616"]}`, ids+`: id "18446744073709551616" is not an unsigned 64-bit decimal number`)
	f("tally.get.post", mp(map[string]any{"ids": []any{1, -1}}), ids+": id -1 is negative")
	f("tally.get.post", `{"idz":[1]}`, `unknown field "idz": this request has "ids", "exact", "window"`)
	f("tally.get.post", mp(map[string]any{"ids": []int{1}, "IDS": []int{1}}), `unknown field "IDS": this request has "ids", "exact", "window"`)
	f("tally.get.post", `{"ids":[1],"window":"2h"}`, `window "2h", want one of 5m, 1h, 1d`)
	f("tally.get.post", `{"ids":[1]} {"ids":[2]}`, "trailing data after the JSON object")
	f("tally.get.post", `{"ids":[1`, "the request is not valid JSON: unexpected end of JSON input")
	f("tally.get.post", "\xc1", "the request is not valid MessagePack: invalid MessagePack type byte 0xc1")
	f("tally.get.post", "\x93\x01\x02\x03", "the request must be a MessagePack map with string keys")
	f("tally.liked", `[1,2]`, "the request must be a JSON object")
	f("tally.liked", `{"uid":1.5,"posts":[2]}`, `"uid" must be an unsigned 64-bit integer (a number or a decimal string): id "1.5" is not an unsigned 64-bit decimal number`)
	f("tally.liked", mp(map[string]any{"uid": true, "posts": []int{2}}), `"uid" must be an unsigned 64-bit integer (a number or a decimal string): id must be an integer or a decimal string, not bool`)
	f("tally.likes.user", `{"uid":1,"limit":"5"}`, `"limit" must be an integer`)
	f("tally.likes.user", `{"uid":1,"before":7}`, `"before" must be a string`)
	f("tally.unread", `{"uids":[1],"uid":"x"}`, `"uid" must be an unsigned 64-bit integer (a number or a decimal string): id "x" is not an unsigned 64-bit decimal number`)
	f("tally.audit", `{"repair":"yes"}`, `"repair" must be true or false`)
}
