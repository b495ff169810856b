package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/natstest"
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

// A watcher that starts behind a backlog of change events — a push gateway resuming,
// `tally watch` from a sequence — reads it without NATS cutting its connection off as a
// slow consumer. It pulled 500 messages at a time, whatever their size: 500 change
// events of 4 096 ids are ~75 MB, past the 64 MiB a server queues for one connection,
// whenever the client read slower than the server wrote; cut off, it started again, and
// pulled as much again. Here all of it is an eighth as large, so that the race detector
// takes seconds rather than a minute: a server that queues 8 MiB for a connection and
// takes payloads of 1 MiB, change events of 640 ids (500 are ~12 MB), a proxy that
// passes 4 MiB/s.
func TestChangesBehindABacklog(t *testing.T) {
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
		MaxPending: 8 << 20, MaxPayload: 1 << 20, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("NATS server not ready")
	}
	js, err := jetstream.New(natstest.Connect(t, s))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sc := pipeline.DefaultStreamConfig()
	if err := pipeline.Setup(ctx, js, sc); err != nil {
		t.Fatal(err)
	}
	ch := pipeline.Change{Fields: []string{"like", "repost", "comment", "view"}}
	for i := range 640 {
		ch.IDs = append(ch.IDs, pipeline.ID(1<<40+i))
		ch.Counts = append(ch.Counts, []uint64{1 << 20, 1 << 20, 1 << 20, 1 << 30})
	}
	data, err := pipeline.Marshal(&ch, false)
	if err != nil {
		t.Fatal(err)
	}
	const events = 600
	for range events {
		if _, err := js.PublishAsync(sc.Subjects.Change("post", 0), data); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal("the backlog was not stored")
	}
	nc, err := nats.Connect(natstest.Throttled(t, s.ClientURL(), 4<<20), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for got, err := range c.Changes(ctx, "post", client.FromSequence(1)) {
		if err != nil || len(got.IDs) != len(ch.IDs) {
			t.Fatalf("change event %d: %d ids, %v", n, len(got.IDs), err)
		}
		if n++; n == events {
			break
		}
	}
	vz, err := s.Varz(&server.VarzOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if vz.SlowConsumers != 0 {
		t.Errorf("%d of %d data bytes' change events read; NATS cut %d connections off as slow consumers", n*len(data), events*len(data), vz.SlowConsumers)
	}
}
