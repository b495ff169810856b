package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/pipeline"
)

// Changes yields what it cannot decode as an error with its place, goes on after it,
// and starts where it is told: at a sequence, or a time. Before, Watch was the only
// form: it dropped such a message without a word and always started with the next one.
func TestChangesErrorsAndResume(t *testing.T) {
	c, stop := startTally()
	t.Cleanup(stop)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, err := jetstream.New(c.Conn())
	if err != nil {
		t.Fatal(err)
	}
	// Not a change event, stored first; then a like, whose count tallyd announces.
	if _, err := js.Publish(ctx, c.Subjects().Change("post", 0), []byte("\xc1 not msgpack")); err != nil {
		t.Fatal(err)
	}
	if err := c.Publish(ctx, pipeline.Event{Type: "like", UID: 7, Post: 42, Tx: "watch-1"}); err != nil {
		t.Fatal(err)
	}
	var bad uint64
	var good client.Change
	for ch, err := range c.Changes(ctx, "post", client.FromSequence(1)) {
		if err != nil {
			if !errors.Is(err, client.ErrBadChange) || ch.Seq == 0 {
				t.Fatalf("change error %v at sequence %d, want ErrBadChange with its sequence", err, ch.Seq)
			}
			bad = ch.Seq
			continue
		}
		good = ch
		break
	}
	if bad == 0 || good.Seq <= bad || len(good.IDs) != 1 || good.IDs[0] != 42 || good.Counts[0][0] != 1 || good.Stored.IsZero() {
		t.Fatalf("bad message at %d, then %+v: want the error first, then post 42 liked once", bad, good)
	}
	// A watcher resuming after the bad message, or from the good one's time, sees the good
	// one first.
	for name, from := range map[string]client.WatchOption{
		"sequence": client.FromSequence(bad + 1),
		"time":     client.FromTime(good.Stored),
	} {
		for ch, err := range c.Changes(ctx, "post", from) {
			if err != nil || ch.Seq != good.Seq {
				t.Errorf("from %s: first %+v %v, want sequence %d", name, ch, err, good.Seq)
			}
			break
		}
	}
	// Ending the context ends the iteration.
	short, cancelShort := context.WithCancel(ctx)
	go cancelShort()
	for ch, err := range c.Changes(short, "post") {
		t.Errorf("a change after the context ended: %+v %v", ch, err)
	}
	for _, err := range c.Changes(ctx, "post", client.FromSequence(0)) {
		if !errors.Is(err, client.ErrBadRequest) {
			t.Errorf("from sequence 0: %v, want ErrBadRequest", err)
		}
	}
}
