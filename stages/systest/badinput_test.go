package systest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/stages/event"
	"github.com/tally-dev/tally/stages/node"
	"github.com/tally-dev/tally/stages/systest/rig"
)

// Every bad request gets a reply whose error says what is wrong, in the request's format.
func TestBadRequests(t *testing.T) {
	n, _ := rig.StartNode(t, nil)
	nc, err := nats.Connect(n.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	manyIDs := `{"ids":[` + strings.Repeat("1,", pipeline.MaxQueryIDs) + `1]}`
	f := func(subject, body, wantErr string) {
		t.Helper()
		m, err := nc.Request(subject, []byte(body), 5*time.Second)
		if err != nil {
			t.Fatalf("%s %q: no reply: %v", subject, body, err)
		}
		var r struct {
			Error string `json:"error"`
		}
		asJSON := pipeline.IsJSON([]byte(body), nil)
		if err := pipeline.Unmarshal(m.Data, asJSON, &r); err != nil {
			// a successful reply has more fields; decode leniently for the message
			_ = json.Unmarshal(m.Data, &r)
		}
		if !strings.Contains(r.Error, wantErr) || wantErr == "" && r.Error != "" {
			t.Fatalf("%s %q: error %q, want it to contain %q", subject, body, r.Error, wantErr)
		}
	}
	f("tally.get.post", "\xff\x00garbage", "trailing data")
	f("tally.get.post", "\xc1", "invalid MessagePack")
	f("tally.get.post", `{"ids":"1"}`, `"ids" must be an array of unsigned 64-bit integers`)
	f("tally.get.post", `{}`, "ids is empty")
	f("tally.get.post", `{"idz":[1]}`, "unknown field")
	f("tally.get.post", `{"ids":[-1]}`, "not an unsigned")
	f("tally.get.post", `{"ids":["18446744073709551616"]}`, "not an unsigned")
	f("tally.get.post", manyIDs, "at most")
	f("tally.get.video", `{"ids":[1]}`, "unknown family")
	f("tally.get.post", `{"ids":[1]} {"ids":[2]}`, "trailing")
	f("tally.liked", `{"posts":[1]}`, "uid is missing")
	f("tally.liked", `{"uid":1}`, "posts must hold")
	f("tally.liked", `[1,2]`, "must be a JSON object")
	f("tally.likes.user", `{"limit":5}`, "uid is missing")
	f("tally.likes.user", `{"uid":1,"limit":100000}`, "out of range")
	f("tally.likes.user", `{"uid":1,"before":"nope"}`, "not a cursor")
	f("tally.likes.post", `{"uid":1}`, "post is missing")
	f("tally.following", `{"uid":"x"}`, "not an unsigned")
	f("tally.followers", `{"uid":1,"limit":-1}`, "out of range")
	f("tally.unread", `{"uid":1,"uids":[2]}`, "not both")
	f("tally.unread", `{}`, "ids is empty")
	// MessagePack garbage is answered in MessagePack.
	m, err := nc.Request("tally.get.post", []byte{0x81, 0xa3, 'i', 'd', 's', 0xdd, 0xff, 0xff, 0xff, 0xff}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var r pipeline.GetReply
	if err := pipeline.Unmarshal(m.Data, false, &r); err != nil || !strings.Contains(r.Error, "exceeds") {
		t.Fatalf("msgpack reply %q: %+v %v", m.Data, r, err)
	}
	// A good JSON request with string ids is answered in JSON.
	m, err = nc.Request("tally.get.post", []byte(`{"ids":["18446744073709551615", 2]}`), 5*time.Second)
	if err != nil || string(m.Data) != `{"fields":["like","repost","comment","view"],"counts":[[0,0,0,0],[0,0,0,0]]}` {
		t.Fatalf("good request: %s %v", m.Data, err)
	}
}

// Malformed events are dead-lettered with the reason and counted; the partition goes on.
func TestBadEventsAreDeadLettered(t *testing.T) {
	n, c := rig.StartNode(t, func(c *node.Config) { c.Partitions = 1 })
	nc, _ := nats.Connect(n.ClientURL())
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	huge := pipeline.Batch{Events: make([]pipeline.Event, pipeline.MaxBatch+1)}
	for i := range huge.Events {
		huge.Events[i] = pipeline.Event{Type: "view", Post: 1}
	}
	hugeData, _ := pipeline.Marshal(&huge, false)
	bad := []struct {
		subject, id string
		data        []byte
		want        string
	}{
		{"tally.ev.like.1", "b1", []byte("\xff\xfe garbage"), "cannot decode"},
		{"tally.ev.like.1", "b2", []byte(`{"uid":1}`), "needs post"},
		{"tally.ev.like.1", "b3", []byte(`{"uid":"one","post":2}`), "not an unsigned"},
		{"tally.ev.view.1", "b4", []byte(`{"post":1,"n":"many"}`), "cannot decode"},
		{"tally.ev.poke.1", "b5", []byte(`{"uid":1}`), "unknown type"},
		{"tally.ev.like.1", "", []byte(`{"uid":1,"post":2}`), "no transaction id"},
		{"tally.ev.batch.1", "b7", hugeData, "at most"},
		{"tally.ev.batch.1", "b8", []byte(`{"events":[]}`), "empty batch"},
		{"tally.ev.batch.1", "b9", []byte(`{"events":[{"type":"view","post":5},{"type":"like","uid":1}]}`), "batch event 1"},
	}
	for _, b := range bad {
		msg := &nats.Msg{Subject: b.subject, Data: b.data, Header: nats.Header{}}
		if b.id != "" {
			msg.Header.Set(jetstream.MsgIDHeader, b.id)
		}
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	// The partition is still counting: the valid event of the mixed batch and a like.
	if err := c.Publish(ctx, pipeline.Event{Type: "like", UID: 1, Post: 5, Tx: "ok"}); err != nil {
		t.Fatal(err)
	}
	rig.Eventually(t, "the valid events after the bad ones", func() (bool, string) {
		r, err := c.Get(ctx, "post", 5)
		if err != nil {
			return false, err.Error()
		}
		return r.Counts[0][0] == 1 && r.Counts[0][3] == 1, fmt.Sprint(r.Counts)
	})
	cons, err := js.OrderedConsumer(ctx, c.Subjects().DLQStream(), jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range bad {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("dead letter %d: %v", i, err)
		}
		var dl event.DeadLetter
		if err := json.Unmarshal(m.Data(), &dl); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(dl.Error, b.want) || !strings.HasPrefix(dl.Subject, "tally.ep.0.") {
			t.Fatalf("dead letter %d: %+v, want error containing %q", i, dl, b.want)
		}
	}
	if got := n.EventStats.Dead.Load(); got != int64(len(bad)) {
		t.Fatalf("Dead = %d, want %d", got, len(bad))
	}
}
