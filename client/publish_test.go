package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/natstest"
)

// TestPublishWhileNATSIsAway: a publish with a context without deadline returns an
// error once the client's timeout has passed when NATS does not answer (its server
// killed, the connection reconnecting), as a producer retrying with the same tx needs.
// Before, it waited for ever for acknowledgements that never came.
func TestPublishWhileNATSIsAway(t *testing.T) {
	s := natstest.Start(t)
	nc, err := nats.Connect(s.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	sc := pipeline.DefaultStreamConfig()
	sc.Partitions = 4
	if err := pipeline.Setup(context.Background(), js, sc); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(nc, client.WithPartitions(4), client.WithTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	evs := []pipeline.Event{{Type: "like", UID: 1, Post: 2}, {Type: "view", Post: 3}}
	if err := c.PublishBatch(context.Background(), "before", evs); err != nil {
		t.Fatal(err)
	}
	s.Shutdown()
	s.WaitForShutdown()
	done := make(chan error, 2)
	go func() {
		done <- c.PublishBatch(context.Background(), "away", evs)
		done <- c.Publish(context.Background(), evs...)
	}()
	for _, what := range []string{"PublishBatch", "Publish"} {
		select {
		case err := <-done:
			if err == nil {
				t.Fatalf("%s stored with NATS away", what)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s still waiting 30 s after NATS went away (timeout 300ms)", what)
		}
	}
}
