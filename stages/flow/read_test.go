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
		r, err := flow.Read(ctx, js, "LATE", "late.>", 0, flow.Buffer{Msgs: 8}, nil)
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

// A Reader holds no more than its Buffer's bytes on C, however many messages it may
// hold: draining a backlog of large batches, each event partition's reader held up to
// a thousand of them. What it holds back is delivered once the user takes, in order
// and whole; a message larger than the bound alone still comes.
func TestReaderBoundedByBytes(t *testing.T) {
	js, err := jetstream.New(natstest.Connect(t, natstest.Start(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "B", Subjects: []string{"b.>"}}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		subj        string
		n, size     int
		bytes, most int // the bound, and the most messages that fit on C under it
	}{{"b.small", 120, 64 << 10, 256 << 10, 4}, {"b.large", 5, 300 << 10, 100 << 10, 1}} {
		var want []uint64
		for i := range c.n {
			data := make([]byte, c.size)
			data[0] = byte(i)
			ack, err := js.Publish(ctx, c.subj, data)
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, ack.Sequence)
			if _, err := js.Publish(ctx, "b.other", []byte("x")); err != nil {
				t.Fatal(err)
			}
		}
		r, err := flow.Read(ctx, js, "B", c.subj, 0, flow.Buffer{Msgs: 1000, Bytes: c.bytes}, nil)
		if err != nil {
			t.Fatal(err)
		}
		natstest.Eventually(t, 10*time.Second, "a message on C", func() (bool, string) { return len(r.C) > 0, "" })
		time.Sleep(300 * time.Millisecond) // what an unbounded reader would have put on C by now
		if n := len(r.C); n > c.most {
			t.Errorf("%s: %d messages of %d KiB on C, want at most %d (%d KiB)", c.subj, n, c.size>>10, c.most, c.bytes>>10)
		}
		for i, seq := range want {
			select {
			case m := <-r.C:
				md, err := m.Metadata()
				if err != nil || md.Sequence.Stream != seq || len(m.Data()) != c.size || m.Data()[0] != byte(i) {
					t.Fatalf("%s: message %d: seq %d (%v), %d bytes; want seq %d, %d bytes", c.subj, i, md.Sequence.Stream, err, len(m.Data()), seq, c.size)
				}
				if n := len(r.C); n > c.most {
					t.Fatalf("%s: %d messages on C after %d taken, want at most %d", c.subj, n, i+1, c.most)
				}
			case <-ctx.Done():
				t.Fatalf("%s: %d of %d messages delivered", c.subj, i, c.n)
			}
		}
		r.Stop()
	}
}
