package flow

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline/natstest"
)

// skipped tells a new consumer's first message that has stored messages of its subject
// before it, after the last one delivered, from one that follows on: other subjects'
// messages between are no gap.
func TestSkipped(t *testing.T) {
	js, err := jetstream.New(natstest.Connect(t, natstest.Start(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, subj := range []string{"s.a", "s.b", "s.a", "s.a"} { // sequences 1 to 4
		if _, err := js.Publish(ctx, subj, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		last, seq uint64
		want      bool
	}{
		{0, 1, false}, // the first one
		{1, 3, false}, // s.b between
		{1, 4, true},  // s.a at 3 never delivered
		{3, 4, false},
		{4, 9, false}, // nothing stored after 4
	} {
		if got := skipped(ctx, st, "s.a", c.last, c.seq); got != c.want {
			t.Errorf("delivered %d after %d: skipped %v, want %v", c.seq, c.last, got, c.want)
		}
	}
}
