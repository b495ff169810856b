package query_test

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/natstest"
	"github.com/tally-dev/tally/stages/query"
	"github.com/tally-dev/tally/stages/systest/rig"
)

// TestReleasedWhileReconnecting: a process gives a partition up around a restart of its
// NATS server, and another process takes the partition over. Every request to the
// partition's subject must then be answered by the new owner. Before, the old owner's
// subscription, drained while its connection reconnected, was sent to the server again
// as the client reconnected and then forgotten by the client: the server handed it about
// half of the partition's requests, which nobody answered (found by TestChaosCluster:
// health asked of partitions timed out for minutes after a NATS restart).
//
// "while reconnecting": the partition is given up while the connection is away (its
// lease lapsed during the outage). "drain overlapped": it is given up with two requests
// still to answer, slowly, and NATS restarts while they are answered.
func TestReleasedWhileReconnecting(t *testing.T) {
	t.Run("while reconnecting", func(t *testing.T) {
		r := newReleaseRig(t, false)
		r.ns.Stop()
		natstest.Eventually(t, 10*time.Second, "the old owner's connection reconnecting", func() (bool, string) {
			return r.old.Status() == nats.RECONNECTING, r.old.Status().String()
		})
		r.oldOwner.SetOwner("post", 0, nil) // its lease lapsed while NATS was away
		r.ns.Start()
		r.takeOver()
	})
	t.Run("drain overlapped", func(t *testing.T) {
		r := newReleaseRig(t, true)
		for range 2 { // one answered while the other waits in the client's queue
			if err := r.client.PublishRequest("tally.part.post.0", nats.NewInbox(), r.get); err != nil {
				t.Fatal(err)
			}
		}
		if err := r.client.Flush(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		r.oldOwner.SetOwner("post", 0, nil)
		r.ns.Stop()
		r.ns.Start()
		time.Sleep(3 * releaseTimeout) // both answered, the drain over
		r.takeOver()
	})
}

// releaseTimeout is the query servers' Timeout in TestReleasedWhileReconnecting: how
// long a slow partition takes to answer.
const releaseTimeout = 500 * time.Millisecond

// releaseRig is a NATS server that restarts on its port and store, a process owning
// partition 0 of 2 (oldOwner, on connection old) and a client.
type releaseRig struct {
	t           *testing.T
	ns          *rig.NATSProc
	old, client *nats.Conn
	oldOwner    *query.Server
	get         []byte // a get of an id of partition 0
	id          pipeline.ID
}

func newReleaseRig(t *testing.T, slow bool) *releaseRig {
	r := &releaseRig{t: t, ns: rig.StartNATS(t)}
	r.old = r.connect()
	r.oldOwner = r.serve(r.old, &memPart{fi: 0, p: 0, n: 2, slow: slow})
	r.client = r.connect()
	for r.id = 1; pipeline.PartitionOf(r.id, 2) != 0; r.id++ {
	}
	var err error
	if r.get, err = pipeline.Marshal(map[string]any{"ids": []pipeline.ID{r.id}}, false); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *releaseRig) connect() *nats.Conn {
	r.t.Helper()
	nc, err := nats.Connect(r.ns.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(nc.Close)
	return nc
}

// serve starts a query server on nc owning post's partition 0 as part (none if nil).
func (r *releaseRig) serve(nc *nats.Conn, part query.Partition) *query.Server {
	r.t.Helper()
	owners := map[string][]query.Partition{}
	for _, f := range families {
		owners[f.Name] = make([]query.Partition, 2)
	}
	if part != nil {
		owners["post"][0] = part
	}
	cfg := query.Config{Subjects: pipeline.NewSubjects(""), Families: families, Partitions: 2, Timeout: releaseTimeout}
	qs := query.New(cfg, nc, nil, owners, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := qs.Start(); err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(qs.Stop)
	return qs
}

// takeOver has another process own partition 0 and asks it twenty gets, each of which
// must be answered.
func (r *releaseRig) takeOver() {
	r.t.Helper()
	natstest.Eventually(r.t, 10*time.Second, "the old owner's connection back", func() (bool, string) {
		return r.old.IsConnected(), r.old.Status().String()
	})
	time.Sleep(500 * time.Millisecond) // nats.go ends a drain after a round trip
	r.serve(r.connect(), &memPart{fi: 0, p: 0, n: 2})
	lost := 0
	const asks = 20
	for range asks {
		m, err := r.client.Request("tally.part.post.0", r.get, time.Second)
		if err != nil {
			lost++
			continue
		}
		var g pipeline.GetReply
		if err := pipeline.UnmarshalReply(m.Data, false, &g); err != nil {
			r.t.Fatal(err)
		}
		check(r.t, g, []pipeline.ID{r.id}, 2)
	}
	if lost > 0 {
		r.t.Fatalf("%d of %d requests to the partition unanswered: the old owner's subscription is still on the server", lost, asks)
	}
}
