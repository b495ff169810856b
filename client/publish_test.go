package client_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/natstest"
)

// TestPublishWhileNATSIsAway: a publish with a context without deadline returns an
// error once the client's timeout has passed when NATS does not answer (its server
// killed, the connection reconnecting), as a producer retrying with the same tx needs.
// Before, it waited for ever for acknowledgements that never came.
func TestPublishWhileNATSIsAway(t *testing.T) {
	s := natstest.Start(t)
	nc, err := nats.Connect(s.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	sc := pipeline.DefaultStreamConfig()
	sc.Partitions = 4
	if err := pipeline.Setup(context.Background(), js, sc); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(nc, client.WithPartitions(4), client.WithTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	evs := []pipeline.Event{{Type: "like", UID: 1, Post: 2}, {Type: "view", Post: 3}}
	if err := c.PublishBatch(context.Background(), "before", evs); err != nil {
		t.Fatal(err)
	}
	s.Shutdown()
	s.WaitForShutdown()
	done := make(chan error, 2)
	go func() {
		done <- c.PublishBatch(context.Background(), "away", evs)
		done <- c.Publish(context.Background(), evs...)
	}()
	for _, what := range []string{"PublishBatch", "Publish"} {
		select {
		case err := <-done:
			if err == nil {
				t.Fatalf("%s stored with NATS away", what)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s still waiting 30 s after NATS went away (timeout 300ms)", what)
		}
	}
}

// TestPublishKeepsOrder: a like and its unlike published in one call are stored in that
// order even when the like's publish is answered "no responders" (its stream's leader
// being elected; here its subject is not yet the stream's). nats.go sends such a publish
// again 250 ms later, and the client sent the unlike at once: stored first, the user
// ended liking the post. The client now sends an event once the one before it of its
// key is stored.
func TestPublishKeepsOrder(t *testing.T) {
	nc := natstest.Connect(t, natstest.Start(t))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	like := pipeline.Event{Type: "like", UID: 7, Post: 42, Tx: "like"}
	unlike := pipeline.Event{Type: "unlike", UID: 7, Post: 42, Tx: "unlike"}
	subj := func(e pipeline.Event) string { return c.Subjects().Event(e.Type, e.Key()) }
	cfg := jetstream.StreamConfig{Name: "ORDER", Subjects: []string{subj(unlike)}}
	st, err := js.CreateStream(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	go func() { // the like's subject comes back within the 250 ms nats.go waits
		time.Sleep(100 * time.Millisecond)
		cfg.Subjects = append(cfg.Subjects, subj(like))
		_, _ = js.UpdateStream(context.Background(), cfg)
	}()
	// Sent again with the same tx if the like's subject came back too late for nats.go's
	// retries (a loaded machine), as a producer would.
	for try := 1; ; try++ {
		err := c.Publish(t.Context(), like, unlike)
		if err == nil {
			break
		}
		if try == 5 {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var got []string
	for seq := uint64(1); seq <= 2; seq++ {
		m, err := st.GetMsg(t.Context(), seq)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, m.Subject)
	}
	if want := []string{subj(like), subj(unlike)}; got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("stored %v, want %v: the unlike before its like", got, want)
	}
}

// TestPublishBatchGroups: a batch is stored as one message a partition, and one more a
// partition for its privileged events (an admin batch), each holding its events in the
// batch's order and cut at pipeline.MaxBatch — read back from the stream and compared
// with the batch filtered by partition and privilege.
func TestPublishBatchGroups(t *testing.T) {
	nc := natstest.Connect(t, natstest.Start(t))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	sc := pipeline.DefaultStreamConfig()
	sc.Partitions = 4
	if err := pipeline.Setup(t.Context(), js, sc); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(5, 6))
	evs := make([]pipeline.Event, 0, 50_000) // past MaxBatch in a partition
	for i := range cap(evs) {
		e := pipeline.Event{Type: "view", Post: pipeline.ID(1 + r.IntN(50)), N: 1, Tx: strconv.Itoa(i)}
		switch r.IntN(6) {
		case 0:
			e = pipeline.Event{Type: "like", UID: pipeline.ID(1 + r.IntN(50)), Post: e.Post, Tx: e.Tx}
		case 1:
			e = pipeline.Event{Type: "incr", Family: "post", ID: e.Post, Field: "view", N: 2, Tx: e.Tx}
		}
		evs = append(evs, e)
	}
	if err := c.PublishBatch(t.Context(), "groups", evs); err != nil {
		t.Fatal(err)
	}
	type group struct {
		p     int
		admin bool
	}
	want := map[group][]string{}
	for _, e := range evs {
		g := group{pipeline.PartitionOf(e.Key(), sc.Partitions), e.Type == "incr"}
		want[g] = append(want[g], e.Tx)
	}
	st, err := js.Stream(t.Context(), sc.Subjects.EventsStream())
	if err != nil {
		t.Fatal(err)
	}
	got := map[group][]string{}
	fams := pipeline.Families(pipeline.DefaultFamilies())
	for seq := uint64(1); seq <= st.CachedInfo().State.LastSeq; seq++ {
		m, err := st.GetMsg(t.Context(), seq)
		if err != nil {
			t.Fatal(err)
		}
		typ, err := sc.Subjects.StoredType(m.Subject)
		if err != nil {
			t.Fatal(err)
		}
		batch, bad, err := pipeline.DecodeEvents(typ, m.Data, m.Header, fams)
		if err != nil || len(bad) > 0 || len(batch) > pipeline.MaxBatch {
			t.Fatalf("message %d (%s): %d events, bad %v, %v", seq, m.Subject, len(batch), bad, err)
		}
		g := group{pipeline.PartitionOf(batch[0].Key(), sc.Partitions), typ == pipeline.TypeAdminBatch}
		for _, e := range batch {
			if p := pipeline.PartitionOf(e.Key(), sc.Partitions); p != g.p || (e.Type == "incr") != g.admin {
				t.Fatalf("message %d (%s) of partition %d, admin %v, holds %+v", seq, m.Subject, g.p, g.admin, e)
			}
			got[g] = append(got[g], e.Tx)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%d groups stored, want %d", len(got), len(want))
	}
	cut := false
	for g, txs := range want {
		cut = cut || len(txs) > pipeline.MaxBatch
		if !slices.Equal(got[g], txs) {
			t.Fatalf("partition %d, admin %v: stored %d events, want %d in the batch's order", g.p, g.admin, len(got[g]), len(txs))
		}
	}
	if !cut {
		t.Fatalf("no partition got more than %d events: nothing was cut", pipeline.MaxBatch)
	}
}
