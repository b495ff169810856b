package client_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tally-dev/tally/pipeline"
)

// TestWatchTop: a watch of a top yields it at once, then each change — a post liked past
// the others takes the lead — and not an unchanged top again.
func TestWatchTop(t *testing.T) {
	c, stop := startTally()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
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
	for top, err := range c.WatchTop(ctx, "post", "like", "1h", 2, 20*time.Millisecond) {
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
