package flow_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline/natstest"
	"github.com/tally-dev/tally/stages/flow"
)

// A stream that is not there yet — NATS restarting, a stream still electing its leader
// — makes Read wait and try again, not fail: a partition must not stop on it (TestChaos
// saw a counter partition stop with "cannot read tally.delta.post.4 from TALLY_DELTAS:
// context deadline exceeded" after a NATS restart).
func TestReadWaitsForTheStream(t *testing.T) {
	js, err := jetstream.New(natstest.Connect(t, natstest.Start(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type result struct {
		r   *flow.Reader
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := flow.Read(ctx, js, "LATE", "late.>", 0, 8)
		done <- result{r, err}
	}()
	select {
	case res := <-done:
		t.Fatalf("Read returned before the stream existed: %v", res.err)
	case <-time.After(300 * time.Millisecond):
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "LATE", Subjects: []string{"late.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "late.1", []byte("x")); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	defer res.r.Stop()
	select {
	case m := <-res.r.C:
		if string(m.Data()) != "x" {
			t.Fatalf("got %q", m.Data())
		}
	case <-ctx.Done():
		t.Fatal("nothing read")
	}
}
