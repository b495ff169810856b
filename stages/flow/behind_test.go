package flow_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline/natstest"
	"github.com/tally-dev/tally/stages/flow"
)

// TestBehindOf: the lag in messages counts the stream's sequences after the position up
// to the subject's newest; the age is that of the subject's oldest message after the
// position, other subjects and purged messages skipped.
func TestBehindOf(t *testing.T) {
	ctx := context.Background()
	_, js := streamS(t, true)
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
	s, js := streamS(t, true)
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

// TestMeterTracksItsReader: a Meter that tracks its partition's reader tells a lag
// from what the reader delivered and the partition has not applied yet — the same lag
// the stream tells — without a request; caught up, it asks the stream, which alone can
// tell that nothing new is stored.
func TestMeterTracksItsReader(t *testing.T) {
	ctx := context.Background()
	// No direct gets: every request goes through the API a test can watch.
	s, js := streamS(t, false)
	// Tracked before anything is published: what a reader delivered before it was
	// tracked is not recorded, and the Meter then asks the stream (as it should), which
	// failed this test once in CI when the reader was quicker than Track.
	r, err := flow.Read(ctx, js, "S", "s.a", 0, flow.Buffer{Msgs: 100}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	var applied atomic.Uint64
	m := flow.NewMeter(js, "S", "s.a")
	m.Track(r, &applied)
	var seqs []uint64 // of s.a
	for i := range 10 {
		subj := []string{"s.a", "s.b"}[i%2]
		ack, err := js.Publish(ctx, subj, nil)
		if err != nil {
			t.Fatal(err)
		}
		if subj == "s.a" {
			seqs = append(seqs, ack.Sequence)
		}
	}
	natstest.Eventually(t, 10*time.Second, "every s.a delivered", func() (bool, string) {
		return len(r.C) == len(seqs), fmt.Sprint(len(r.C))
	})
	monitor := natstest.Connect(t, s)
	gets, err := monitor.SubscribeSync("$JS.API.STREAM.MSG.GET.S")
	if err != nil {
		t.Fatal(err)
	}
	if err := monitor.Flush(); err != nil {
		t.Fatal(err)
	}
	var asked []string // the requests' bodies
	// requests takes the requests asked since it was last called: a flush of the
	// monitor's connection does not wait for a request another connection made to reach
	// it (one came late in a clean-clone CI run), so it takes them until none comes for a
	// while.
	requests := func() int {
		t.Helper()
		if err := monitor.Flush(); err != nil {
			t.Fatal(err)
		}
		asked = asked[:0]
		for {
			m, err := gets.NextMsg(100 * time.Millisecond)
			if errors.Is(err, nats.ErrTimeout) {
				return len(asked)
			}
			if err != nil {
				t.Fatal(err)
			}
			asked = append(asked, string(m.Data))
		}
	}
	now := time.Now().Add(3 * time.Second)
	for _, pos := range []uint64{0, seqs[0], seqs[2], seqs[3] + 1} { // +1: an s.b passed
		applied.Store(pos)
		got, err := m.Behind(ctx, pos, now)
		if n := requests(); err != nil || n != 0 {
			t.Fatalf("Behind(%d) = %+v %v, %d requests, want none", pos, got, err, n)
		}
		want, err := flow.BehindOf(ctx, js, "S", "s.a", pos, now)
		if err != nil || got != want {
			t.Errorf("Behind(%d) = %+v, the stream's %+v %v", pos, got, want, err)
		}
		requests()
	}
	// Caught up: the stream is asked, once, for a message after the position, whose
	// reply then holds none (the newest message, asked first before, came whole).
	last := seqs[len(seqs)-1]
	applied.Store(last)
	if b, err := m.Behind(ctx, last, now); err != nil || b != (flow.Behind{Pos: last}) || requests() != 1 || !strings.Contains(asked[0], "next_by_subj") {
		t.Fatalf("Behind caught up = %+v %v, asked %q; want no lag, asked of the stream once for the next message", b, err, asked)
	}
	// Something new, delivered or not yet: lagging either way.
	if _, err := js.Publish(ctx, "s.a", nil); err != nil {
		t.Fatal(err)
	}
	if b, err := m.Behind(ctx, last, time.Now()); err != nil || b.Msgs != 2 {
		t.Fatalf("Behind after a new message = %+v %v, want 2 sequences", b, err)
	}
	// Not tracking: asked of the stream again.
	m.Track(nil, nil)
	if b, err := m.Behind(ctx, last, time.Now()); err != nil || b.Msgs != 2 || requests() == 0 {
		t.Fatalf("Behind untracked = %+v %v, want 2 sequences, asked of the stream", b, err)
	}
}

// streamS starts a server with stream S of the subjects s.>.
func streamS(t *testing.T, allowDirect bool) (*server.Server, jetstream.JetStream) {
	t.Helper()
	s := natstest.Start(t)
	js, err := jetstream.New(natstest.Connect(t, s))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, AllowDirect: allowDirect}); err != nil {
		t.Fatal(err)
	}
	return s, js
}
