package flow

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline/natstest"
)

// The consumers of readers whose processes died go once they have been inactive for
// readInactive, so that new readers can be made on a stream at its consumer cap: with
// nats.go's 5 minutes, a process killed every few seconds filled TALLY_DELTAS's 1 000
// (nats-server's default cap) and no partition starting could read for minutes. Here a
// stream capped at 4 and a threshold of a second: four readers on connections that then
// die, and a fifth, which reads once theirs are gone. (With inactive 0, nats.go's
// 5 minutes, it still has not read after the 10 s the test waits.)
func TestDeadReadersConsumersMakeRoom(t *testing.T) {
	s := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, err := jetstream.New(natstest.Connect(t, s))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "CAP", Subjects: []string{"cap.>"}, MaxConsumers: 4}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "cap.a", []byte("x")); err != nil {
		t.Fatal(err)
	}
	const inactive = time.Second
	for range 4 {
		nc := natstest.Connect(t, s)
		djs, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := read(ctx, djs, "CAP", "cap.a", 0, Buffer{Msgs: 8}, nil, inactive); err != nil {
			t.Fatal(err)
		}
		nc.Close() // the process dies: its consumer stays on the server
	}
	st, err := js.Stream(ctx, "CAP")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := st.Info(ctx); err != nil || info.State.Consumers != 4 {
		t.Fatalf("consumers after the four readers died: %v %v, want 4 left on the server", info, err)
	}
	begun := time.Now()
	r, err := read(ctx, js, "CAP", "cap.a", 0, Buffer{Msgs: 8}, nil, inactive)
	if err != nil {
		t.Fatalf("a new reader on the stream at its cap: %v after %v", err, time.Since(begun))
	}
	defer r.Stop()
	select {
	case m := <-r.C:
		t.Logf("read %q %v after the readers died", m.Data(), time.Since(begun).Round(10*time.Millisecond))
	case <-ctx.Done():
		t.Fatal("the new reader read nothing")
	}
}
