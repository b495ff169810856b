package systest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/embedded"
	"github.com/tally-dev/tally/pipeline/natstest"
	"github.com/tally-dev/tally/stages/hop/hoptest"
	"github.com/tally-dev/tally/stages/node"
	"github.com/tally-dev/tally/stages/systest/rig"
)

// Issue 22, item 3: a publish lost silently (no error, no ack) during a backlog drain
// let the sender go on to that destination until its AckTimeout found it: the receiver
// held every batch stored above the gap, gave the gap up once more than hop.Window were
// held, and then skipped the re-sent batch as a duplicate — here system notices lost on
// the other partition. The window of the sender's outbox (hop.Window, hop.WindowBytes)
// keeps what a receiver holds above a gap that can still fill within its limit. 1 % of
// internal publishes are lost, found after 3 s: long enough for the drain to pile more
// than hop.Window batches above a lost one, were it not for the window.
func TestLostPublishesNeverGiveAGapUp(t *testing.T) {
	// A small payload limit makes small hop batches (half of it): the 1 000 and more a
	// sender could pile above a lost one take a backlog of 20 000 events, not millions.
	s, err := embedded.Start(embedded.Config{Host: "127.0.0.1", Port: -1, StoreDir: t.TempDir(), MaxPayload: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(256))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sc := pipeline.DefaultStreamConfig()
	sc.Partitions = 2
	if err := pipeline.Setup(ctx, js, sc); err != nil {
		t.Fatal(err)
	}
	// The backlog, on one partition: system notices, each copied to the other partition
	// in hop batches of 512 bytes (a dozen copies), and now and then views (delta
	// batches). One notice a message, so that a transaction (up to 1 024 messages) forwards
	// hundreds of copies: the stage encodes up to 2 000 of them again for every hop batch it
	// cuts, which thousands of tiny batches from one transaction make slow.
	const messages, per, posts = 20_000, 1, 20
	views := map[uint64]uint64{}
	var futs []jetstream.PubAckFuture
	publish := func(subject, id string, evs []pipeline.Event) {
		t.Helper()
		data, err := pipeline.Marshal(&pipeline.Batch{Events: evs}, false)
		if err != nil {
			t.Fatal(err)
		}
		f, err := js.PublishAsync(subject, data, jetstream.WithMsgID(id))
		if err != nil {
			t.Fatal(err)
		}
		futs = append(futs, f)
	}
	for m := range messages {
		sys := make([]pipeline.Event, per)
		for i := range sys {
			sys[i] = pipeline.Event{Type: "system", ID: pipeline.ID(m*per + i + 1)}
		}
		publish("tally.ev.adminbatch.1", fmt.Sprint("notices-", m), sys)
		if m%100 == 0 {
			vs := make([]pipeline.Event, posts)
			for i := range vs {
				post := uint64(1 + (m*len(vs)+i)%posts)
				vs[i] = pipeline.Event{Type: "view", Post: pipeline.ID(post)}
				views[post]++
			}
			publish("tally.ev.batch.1", fmt.Sprint("views-", m), vs)
		}
	}
	for _, f := range futs {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			t.Fatal(err)
		}
	}
	n, c := rig.StartNode(t, func(c *node.Config) {
		c.NATSURL = s.ClientURL()
		c.Partitions = sc.Partitions
		c.WrapPublisher = hoptest.Wrap(hoptest.Faults{Lose: 0.01, AckTimeout: 3 * time.Second, Seed: 5})
	})
	ids := make([]uint64, posts)
	for i := range ids {
		ids[i] = uint64(i + 1)
	}
	gaps := func() string {
		return fmt.Sprintf("gaps given up: %d of hop batches, %d of delta batches", n.EventStats.HopGaps.Load(), n.CounterStats.Hop.GapsSkipped.Load())
	}
	start := time.Now()
	natstest.Eventually(t, time.Minute, "every count of the backlog", func() (bool, string) {
		select {
		case <-n.Failed():
			t.Fatal("the node stopped")
		default:
		}
		if n.EventStats.HopGaps.Load() > 0 || n.CounterStats.Hop.GapsSkipped.Load() > 0 {
			t.Fatal(gaps())
		}
		r, err := getAll(ctx, c, ids)
		if err != nil {
			return false, err.Error()
		}
		for i, id := range ids {
			if got := r.Counts[i]; len(got) < 4 || got[3] != views[id] {
				return false, fmt.Sprintf("post %d: counts %v, want %d views", id, got, views[id])
			}
		}
		u, err := c.UnreadMany(ctx, 1, 2, 3, 4)
		if err != nil {
			return false, err.Error()
		}
		for i, u := range u {
			if u.System != messages*per {
				return false, fmt.Sprintf("user %d: %d system notices unread, want %d", i+1, u.System, messages*per)
			}
		}
		return true, ""
	})
	if g := gaps(); n.EventStats.HopGaps.Load() > 0 || n.CounterStats.Hop.GapsSkipped.Load() > 0 {
		t.Fatal(g)
	}
	if n.EventStats.Retries.Load() == 0 {
		t.Fatal("no publish was found lost and sent again")
	}
	t.Logf("%d notices (%d copied in hop batches) and %d views drained in %v; %d publishes found lost and sent again; %s",
		messages*per, n.EventStats.Forwarded.Load(), posts*messages/100, time.Since(start).Round(time.Millisecond), n.EventStats.Retries.Load(), gaps())
}
