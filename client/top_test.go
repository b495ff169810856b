package client_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/pipeline"
)

// TestWatchTop: a watch of a top yields it at once, then each change — a post liked past
// the others takes the lead — as tallyd pushes it (the watch is not asked again within
// the test's 10 s), and not an unchanged top again.
func TestWatchTop(t *testing.T) {
	c, stop := startTally()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	like := func(tx string, post uint64, users ...uint64) {
		t.Helper()
		var evs []pipeline.Event
		for _, u := range users {
			evs = append(evs, pipeline.Event{Type: "like", UID: pipeline.ID(u), Post: pipeline.ID(post)})
		}
		if err := c.PublishBatch(ctx, tx, evs); err != nil {
			t.Fatal(err)
		}
	}
	like("a", 42, 1, 2, 3)
	like("b", 43, 1)
	var seen []string
	for top, err := range c.WatchTop(ctx, "post", "like", "1h", 2, time.Hour) {
		if err != nil {
			t.Fatal(err)
		}
		got := fmt.Sprint(top.IDs, top.Changes)
		if len(seen) > 0 && got == seen[len(seen)-1] {
			t.Fatalf("an unchanged top yielded again: %s", got)
		}
		seen = append(seen, got)
		if got == "[42 43] [3 1]" && len(seen) < 10 {
			like("c", 43, 4, 5, 6, 7)
		}
		if got == "[43 42] [5 3]" {
			return
		}
	}
	t.Fatalf("the watch ended after %v without the lead changing", seen)
}

// TestWatchTopJSON: a JSON client in any language watches a top with a plain subscription
// and request: the pushed tops come in JSON, whole, each time the top changes.
func TestWatchTopJSON(t *testing.T) {
	c, stop := startTally()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nc := c.Conn()
	pushed, err := nc.SubscribeSync("tally.topchg.post.like.1h.2")
	if err != nil {
		t.Fatal(err)
	}
	msg := nats.NewMsg("tally.top.post")
	msg.Data = []byte(`{"field":"like","window":"1h","limit":2,"watch":true}`)
	msg.Header.Set("Content-Type", "application/json")
	if _, err := nc.RequestMsgWithContext(ctx, msg); err != nil {
		t.Fatal(err)
	}
	if err := c.PublishBatch(ctx, "a", []pipeline.Event{{Type: "like", UID: 1, Post: 42}, {Type: "like", UID: 2, Post: 42}, {Type: "like", UID: 1, Post: 43}}); err != nil {
		t.Fatal(err)
	}
	for {
		m, err := pushed.NextMsgWithContext(ctx)
		if err != nil {
			t.Fatalf("no pushed top with both posts: %v", err)
		}
		if m.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("a top watched in JSON pushed as %q: %x", m.Header.Get("Content-Type"), m.Data)
		}
		if string(m.Data) == `{"field":"like","window":"1h","ids":[42,43],"changes":[2,1]}` {
			return
		}
	}
}
