package client_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/pipeline"
)

// One client shared by many goroutines publishing (Publish, PublishBatch, the first of
// which reads the partition count) and querying, as its doc promises: run with -race.
// Every event is counted once. Before, the partition count was written without a lock
// and -race reported the first PublishBatches.
func TestConcurrentUse(t *testing.T) {
	tally, stop := startTally()
	t.Cleanup(stop)
	c, err := client.New(tally.Conn()) // a fresh client: the partition count not read yet
	if err != nil {
		t.Fatal(err)
	}
	const goroutines, rounds = 8, 5
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*rounds*3)
	for g := range goroutines {
		wg.Go(func() {
			for r := range rounds {
				tx := fmt.Sprintf("g%d.r%d", g, r)
				views := []pipeline.Event{{Type: "view", Post: 1}, {Type: "view", Post: 2}, {Type: "view", Post: 3}}
				if err := c.PublishBatch(ctx, tx, views); err != nil {
					errs <- fmt.Errorf("PublishBatch %s: %w", tx, err)
				}
				if err := c.Publish(ctx, pipeline.Event{Type: "view", Post: 4, Tx: tx}); err != nil {
					errs <- fmt.Errorf("Publish %s: %w", tx, err)
				}
				if _, err := c.Get(ctx, "post", 1, 2, 3, 4); err != nil {
					errs <- fmt.Errorf("Get: %w", err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	const want = goroutines * rounds
	var r *pipeline.GetReply
	until(func() bool {
		r, err = c.Get(ctx, "post", 1, 2, 3, 4)
		return err == nil && r.Counts[0][3] == want && r.Counts[1][3] == want && r.Counts[2][3] == want && r.Counts[3][3] == want
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range r.Counts {
		if c[3] != want {
			t.Errorf("post %d: %d views, want %d", i+1, c[3], want)
		}
	}
}
