package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/pipeline"
)

// newerTally answers on prefix "newer" what the real tallyd behind c answers on "tally",
// with one field more in every reply: a tallyd of a later minor version.
func newerTally(t *testing.T, nc *nats.Conn) {
	t.Helper()
	sub, err := nc.Subscribe("newer.>", func(m *nats.Msg) {
		subject := "tally." + strings.TrimPrefix(m.Subject, "newer.")
		r, err := nc.Request(subject, m.Data, 5*time.Second)
		if err != nil {
			return
		}
		var reply map[string]any
		if err := msgpack.Unmarshal(r.Data, &reply); err != nil {
			t.Errorf("%s: cannot decode the reply: %v", subject, err)
			return
		}
		reply["shard_hint"] = map[string]any{"zone": "b", "weights": []any{1, 2}}
		data, err := msgpack.Marshal(reply)
		if err != nil {
			t.Errorf("%s: %v", subject, err)
			return
		}
		_ = m.Respond(data)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
}

// Every call reads the replies of a newer tallyd, one field more in each: the fields it
// knows, the error and its sentinel. Before, each failed with "msgpack: unknown field".
func TestRepliesWithNewFields(t *testing.T) {
	real, stop := startTally()
	t.Cleanup(stop)
	newerTally(t, real.Conn())
	c, err := client.New(real.Conn(), client.WithPrefix("newer"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := real.Publish(ctx, pipeline.Event{Type: "like", UID: 7, Post: 42, Owner: 3, Tx: "compat-1"}); err != nil {
		t.Fatal(err)
	}
	// Applied, as the real tallyd says (the owner's unread like counted in the owner's
	// partition, after the post's count).
	until(func() bool {
		r, err := real.Get(ctx, "post", 42)
		u, uerr := real.Unread(ctx, 3)
		return err == nil && r.Counts[0][0] == 1 && uerr == nil && u.Like == 1
	})
	if r, err := c.Get(ctx, "post", 42); err != nil || r.Counts[0][0] != 1 || r.Fields[0] != "like" {
		t.Errorf("Get: %+v %v", r, err)
	}
	if liked, err := c.Liked(ctx, 7, 42, 43); err != nil || !liked[0] || liked[1] {
		t.Errorf("Liked: %v %v", liked, err)
	}
	if page, err := c.List(ctx, client.LikesOfUser, 7, 10, ""); err != nil || len(page.IDs) != 1 || page.IDs[0] != 42 {
		t.Errorf("List: %+v %v", page, err)
	}
	if u, err := c.Unread(ctx, 3); err != nil || u.Like != 1 {
		t.Errorf("Unread: %+v %v", u, err)
	}
	if us, err := c.UnreadMany(ctx, 3, 4); err != nil || len(us) != 2 || us[0].Like != 1 {
		t.Errorf("UnreadMany: %+v %v", us, err)
	}
	if h, err := c.Health(ctx); err != nil || h.Partitions != 4 || h.Version != pipeline.ProtocolVersion {
		t.Errorf("Health: %+v %v, want 4 partitions and version %s", h, err, pipeline.ProtocolVersion)
	}
	if _, err := c.Get(ctx, "posts", 42); !errors.Is(err, client.ErrUnknownFamily) || !errors.Is(err, client.ErrRemote) {
		t.Errorf("Get of an unknown family: %v, want ErrUnknownFamily", err)
	}
}

// A change event with a field its reader does not know is delivered with the fields it
// knows. Before, Watch skipped it silently and its channel stayed open.
func TestWatchChangeWithNewField(t *testing.T) {
	c, stop := startTally()
	t.Cleanup(stop)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	changes, err := c.Watch(ctx, "post")
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(c.Conn())
	if err != nil {
		t.Fatal(err)
	}
	data, err := msgpack.Marshal(map[string]any{"ids": []uint64{42}, "fields": []string{"like"}, "counts": [][]uint64{{5}}, "flush": 17})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, c.Subjects().Change("post", 0), data); err != nil {
		t.Fatal(err)
	}
	select {
	case ch, ok := <-changes:
		if !ok || len(ch.IDs) != 1 || ch.IDs[0] != 42 || ch.Counts[0][0] != 5 {
			t.Fatalf("change %+v (open %v), want id 42 at 5", ch, ok)
		}
	case <-ctx.Done():
		t.Fatal("no change event delivered: the one with a new field was skipped")
	}
}
