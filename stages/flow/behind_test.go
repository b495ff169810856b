package flow_test

import (
	"context"
	"fmt"
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
	f(t, "s.a", 5, time.Now(), flow.Behind{Pos: 5})
	f(t, "s.a", 1, stored(3).Add(7*time.Second), flow.Behind{Msgs: 4, Age: 7 * time.Second, Pos: 1})
	f(t, "s.b", 2, stored(4).Add(time.Second), flow.Behind{Msgs: 2, Age: time.Second, Pos: 2})
	f(t, "s.b", 0, stored(2).Add(-time.Second), flow.Behind{Msgs: 4}) // a clock behind NATS's
	f(t, "s.c", 0, time.Now(), flow.Behind{})
	if err := st.Purge(ctx, jetstream.WithPurgeSequence(4)); err != nil { // 1..3 gone
		t.Fatal(err)
	}
	f(t, "s.a", 1, stored(5).Add(time.Second), flow.Behind{Msgs: 4, Age: time.Second, Pos: 1})
}

// TestMeterKeepsTheStream: a Meter asked again and again looks its stream up once — a
// health check or a scrape asks the lag of every partition, and a stream's info is the
// dearest request of a lag — and again only after a request through it failed.
func TestMeterKeepsTheStream(t *testing.T) {
	ctx := context.Background()
	s := natstest.Start(t)
	js, err := jetstream.New(natstest.Connect(t, s))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, AllowDirect: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "s.a", nil); err != nil {
		t.Fatal(err)
	}
	monitor := natstest.Connect(t, s)
	infos, err := monitor.SubscribeSync("$JS.API.STREAM.INFO.S")
	if err != nil {
		t.Fatal(err)
	}
	if err := monitor.Flush(); err != nil { // the server has the subscription
		t.Fatal(err)
	}
	m := flow.NewMeter(js, "S", "s.a")
	for range 10 {
		if b, err := m.Behind(ctx, 0, time.Now()); err != nil || b.Msgs != 1 {
			t.Fatalf("Behind = %+v %v, want 1 message", b, err)
		}
	}
	if err := js.DeleteStream(ctx, "S"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Behind(ctx, 0, time.Now()); err == nil {
		t.Fatal("the lag of a deleted stream told")
	}
	// The server removes the deleted stream's files on its own time: making it again at
	// once may fail ("error creating store for stream"), for a moment.
	natstest.Eventually(t, 10*time.Second, "the stream made again", func() (bool, string) {
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, AllowDirect: true})
		return err == nil, fmt.Sprint(err)
	})
	for range 2 {
		if _, err := js.Publish(ctx, "s.a", nil); err != nil {
			t.Fatal(err)
		}
	}
	if b, err := m.Behind(ctx, 0, time.Now()); err != nil || b.Msgs != 2 {
		t.Fatalf("Behind of the stream made again = %+v %v, want 2 messages", b, err)
	}
	if err := monitor.Flush(); err != nil { // the copies of the requests made are in
		t.Fatal(err)
	}
	n, _, err := infos.Pending()
	if err != nil || n != 2 {
		t.Fatalf("%d stream info requests (%v), want 2: one at first, one after the failure", n, err)
	}
}
