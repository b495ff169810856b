package flow_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline/natstest"
	"github.com/tally-dev/tally/stages/flow"
)

// TestBehindOf: the lag in messages counts the stream's sequences after the position up
// to the subject's newest; the age is that of the subject's oldest message after the
// position, other subjects and purged messages skipped.
func TestBehindOf(t *testing.T) {
	ctx := context.Background()
	js, err := jetstream.New(natstest.Connect(t, natstest.Start(t)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, AllowDirect: true}); err != nil {
		t.Fatal(err)
	}
	for _, subj := range []string{"s.a", "s.b", "s.a", "s.b", "s.a"} { // sequences 1..5
		if _, err := js.Publish(ctx, subj, nil); err != nil {
			t.Fatal(err)
		}
	}
	st, _ := js.Stream(ctx, "S")
	stored := func(seq uint64) time.Time {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		return m.Time
	}
	f := func(t *testing.T, filter string, pos uint64, now time.Time, want flow.Behind) {
		t.Helper()
		got, err := flow.BehindOf(ctx, js, "S", filter, pos, now)
		if err != nil || got != want {
			t.Errorf("BehindOf(%s, %d) = %+v %v, want %+v", filter, pos, got, err, want)
		}
	}
	f(t, "s.a", 5, time.Now(), flow.Behind{})
	f(t, "s.a", 1, stored(3).Add(7*time.Second), flow.Behind{Msgs: 4, Age: 7 * time.Second})
	f(t, "s.b", 2, stored(4).Add(time.Second), flow.Behind{Msgs: 2, Age: time.Second})
	f(t, "s.b", 0, stored(2).Add(-time.Second), flow.Behind{Msgs: 4}) // a clock behind NATS's
	f(t, "s.c", 0, time.Now(), flow.Behind{})
	if err := st.Purge(ctx, jetstream.WithPurgeSequence(4)); err != nil { // 1..3 gone
		t.Fatal(err)
	}
	f(t, "s.a", 1, stored(5).Add(time.Second), flow.Behind{Msgs: 4, Age: time.Second})
}
