package client_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/stages/node"
)

// startTally runs a whole Tally in this process, as `go run ./cmd/tallyd` would, on a
// free port with its data in a temporary directory, and connects a client to it. In an
// application, connect to the tallyd you run instead.
func startTally() (c *client.Client, stop func()) {
	dir, err := os.MkdirTemp("", "tally-example-")
	if err != nil {
		panic(err)
	}
	cfg := node.DefaultConfig()
	cfg.DataDir, cfg.Listen, cfg.Partitions, cfg.FlushInterval = dir, "127.0.0.1:-1", 4, 10*time.Millisecond
	n, err := node.Start(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		panic(err)
	}
	nc, err := nats.Connect(n.ClientURL())
	if err != nil {
		panic(err)
	}
	if c, err = client.New(nc); err != nil {
		panic(err)
	}
	return c, func() { nc.Close(); _ = n.Close(); _ = os.RemoveAll(dir) }
}

// until polls f for up to 10 seconds: counts are applied asynchronously, a flush
// interval after the events are stored.
func until(f func() bool) {
	for deadline := time.Now().Add(10 * time.Second); !f() && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
}

func Example() {
	c, stop := startTally()
	defer stop()
	ctx := context.Background()

	// Give each event the transaction id of the action it records: sending it again
	// (a retry after a timeout, say) counts it once.
	err := c.Publish(ctx,
		pipeline.Event{Type: "like", UID: 7, Post: 42, Owner: 3, Tx: "t1"},
		pipeline.Event{Type: "like", UID: 8, Post: 42, Owner: 3, Tx: "t2"},
		pipeline.Event{Type: "like", UID: 8, Post: 42, Owner: 3, Tx: "t2"}, // a retry
		pipeline.Event{Type: "view", Post: 42, N: 10, Tx: "t3"},
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	var r *pipeline.GetReply
	until(func() bool {
		r, err = c.Get(ctx, "post", 42, 43)
		// The likes reach post 42's partition through their users' partitions, the
		// view straight: wait for all of them.
		return err == nil && r.Counts[0][0] == 2 && r.Counts[0][3] == 10
	})
	fmt.Println(r.Fields)
	fmt.Println(r.Counts)
	// Output:
	// [like repost comment view]
	// [[2 0 0 10] [0 0 0 0]]
}

func ExampleClient_PublishBatch() {
	c, stop := startTally()
	defer stop()
	ctx := context.Background()

	// One message per partition, deduplicated as a whole: re-send the same batch with
	// the same id after an error.
	var events []pipeline.Event
	for uid := pipeline.ID(1); uid <= 100; uid++ {
		events = append(events, pipeline.Event{Type: "follow", UID: uid, Target: 1000})
	}
	if err := c.PublishBatch(ctx, "followers-of-1000", events); err != nil {
		fmt.Println(err)
		return
	}
	var counts []uint64
	until(func() bool {
		r, err := c.Get(ctx, "user", 1000)
		if err == nil {
			counts = r.Counts[0]
		}
		return err == nil && counts[0] == 100
	})
	fmt.Println("followers:", counts[0])
	// Output: followers: 100
}

func ExampleClient_List() {
	c, stop := startTally()
	defer stop()
	ctx := context.Background()

	for i, post := range []pipeline.ID{10, 11, 12} {
		e := pipeline.Event{Type: "like", UID: 5, Post: post, TS: int64(1000 + i), Tx: fmt.Sprint("l", post)}
		if err := c.Publish(ctx, e); err != nil {
			fmt.Println(err)
			return
		}
	}
	var page *client.Page
	until(func() bool {
		var err error
		page, err = c.List(ctx, client.LikesOfUser, 5, 2, "")
		return err == nil && len(page.IDs) == 2 && page.Next != "" // all three applied
	})
	fmt.Println("newest first:", page.IDs)
	rest, err := c.List(ctx, client.LikesOfUser, 5, 2, page.Next)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("next page:", rest.IDs)
	// Output:
	// newest first: [12 11]
	// next page: [10]
}

func ExampleClient_Get_errors() {
	c, stop := startTally()
	defer stop()

	_, err := c.Get(context.Background(), "posts", 42)
	fmt.Println(errors.Is(err, client.ErrUnknownFamily))
	_, err = c.Get(context.Background(), "post")
	fmt.Println(errors.Is(err, client.ErrBadRequest))
	// Output:
	// true
	// true
}
