package reference_test

import (
	"context"
	"slices"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/natstest"
	"github.com/tally-dev/tally/stages/reference"
)

// TestStoredAfterInTurns: a model fed the events stream in turns, each from the last
// sequence the turn before read, is the model of the whole stream read at once — the
// chaos tests' check after every cycle relies on it.
func TestStoredAfterInTurns(t *testing.T) {
	s := natstest.Start(t)
	nc := natstest.Connect(t, s)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sc := pipeline.DefaultStreamConfig()
	sc.Partitions = 4
	if err := pipeline.Setup(ctx, js, sc); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(nc, client.WithPartitions(4))
	if err != nil {
		t.Fatal(err)
	}
	turns := reference.New()
	var read uint64
	for turn := range 3 {
		var evs []pipeline.Event
		for i := range 50 {
			u, post := pipeline.ID(1+i%7), pipeline.ID(100+(i+turn)%5)
			typ := "like"
			if (i+turn)%3 == 0 {
				typ = "unlike"
			}
			evs = append(evs, pipeline.Event{Type: typ, UID: u, Post: post}, pipeline.Event{Type: "follow", UID: u, Target: pipeline.ID(1 + (i+turn)%6)})
		}
		if err := c.PublishBatch(ctx, "turn-"+strconv.Itoa(turn), evs); err != nil {
			t.Fatal(err)
		}
		n, last, err := turns.StoredAfter(ctx, js, c.Subjects(), "", read, nil)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 || last <= read {
			t.Fatalf("turn %d read %d messages, to %d from %d", turn, n, last, read)
		}
		read = last
	}
	if n, last, err := turns.StoredAfter(ctx, js, c.Subjects(), "", read, nil); err != nil || n != 0 || last != read {
		t.Fatalf("a turn with nothing stored since read %d messages, to %d (from %d): %v", n, last, read, err)
	}
	whole := reference.New()
	if _, err := whole.Stored(ctx, js, c.Subjects(), "", nil); err != nil {
		t.Fatal(err)
	}
	if whole.Events() != turns.Events() || whole.Events() == 0 {
		t.Fatalf("events: whole %d, in turns %d", whole.Events(), turns.Events())
	}
	for _, q := range []struct {
		family string
		ids    []uint64
	}{{"post", []uint64{100, 101, 102, 103, 104}}, {"user", []uint64{1, 2, 3, 4, 5, 6, 7}}} {
		for _, id := range q.ids {
			if w, g := whole.Counts(q.family, id), turns.Counts(q.family, id); !slices.Equal(w, g) {
				t.Errorf("%s %d: whole %v, in turns %v", q.family, id, w, g)
			}
		}
	}
}
