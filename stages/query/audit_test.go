package query_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/natstest"
	"github.com/tally-dev/tally/stages/flow"
	"github.com/tally-dev/tally/stages/query"
	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/delivery"
	"github.com/tally-dev/tally/store/graph"
	"github.com/tally-dev/tally/store/stagelog"
)

// scriptedPart is a counter partition whose like count of every id is read from likes,
// one value per Get, the last repeated: a counter that a delta in flight changes between
// two reads.
type scriptedPart struct {
	likes []uint64
	calls atomic.Int64
}

func (p *scriptedPart) Get(_ context.Context, ids []uint64, out [][]uint64) error {
	n := int(p.calls.Add(1)) - 1
	v := p.likes[min(n, len(p.likes)-1)]
	for i := range ids {
		clear(out[i])
		out[i][0] = v
	}
	return nil
}
func (p *scriptedPart) Ready() bool                                 { return true }
func (p *scriptedPart) Behind(context.Context) (flow.Behind, error) { return flow.Behind{}, nil }

// lagging is lagging by msgs.
type lagging struct{ msgs uint64 }

func (l lagging) Behind(context.Context) (flow.Behind, error) { return flow.Behind{Msgs: l.msgs}, nil }

// auditServer serves one partition (so every id is in it) of post counted by part, with
// post 7 liked by 3 users in its relations and one event stage lagging by lag, which
// has an outbox entry not acknowledged yet when pending.
func auditServer(t *testing.T, part query.Partition, lag uint64, pending bool) *query.Server {
	t.Helper()
	db := openDB(t)
	err := db.Update(func(txn *cold.Txn) error {
		for uid := range uint64(3) {
			if _, err := graph.Relate(txn, 0, graph.Like, graph.Rel{A: uid + 1, B: 7}, 1); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	owners := map[string][]query.Partition{"post": {part}}
	srv := query.New(query.Config{Subjects: pipeline.NewSubjects(""), Families: families, Partitions: 1},
		natstest.Connect(t, natstest.Start(t)), db, owners, slog.New(slog.NewTextHandler(io.Discard, nil)))
	srv.SetStage(0, &fakeStage{lag: lagging{lag}, unacked: pending})
	return srv
}

// TestAuditCountInFlight: a counter that catches up between attempts, or keeps moving,
// is not drift; a counter that stays different is; nothing is compared while a stage
// lags. Each with the reason in the reply.
func TestAuditCountInFlight(t *testing.T) {
	f := func(t *testing.T, likes []uint64, lag uint64, pending, wantDrift bool, wantSkip string) {
		t.Helper()
		part := &scriptedPart{likes: likes}
		// Time enough for a loaded machine: an audit that runs out of it skips the
		// counter, which no case here wants but the lagging stage's.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		r, err := auditServer(t, part, lag, pending).Audit(ctx, pipeline.AuditRequest{Posts: []pipeline.ID{7}})
		if err != nil {
			t.Fatal(err)
		}
		if got := len(r.Drift) > 0; got != wantDrift {
			t.Fatalf("counter reads %v: drift %+v (skipped %+v), want drift %v", likes, r.Drift, r.Skipped, wantDrift)
		}
		if wantDrift && (r.Drift[0] != pipeline.Drift{Family: "post", ID: 7, Field: "like", Counter: likes[len(likes)-1], Relations: 3}) {
			t.Errorf("drift %+v", r.Drift[0])
		}
		switch {
		case wantSkip == "" && len(r.Skipped) > 0:
			t.Errorf("counter reads %v: skipped %+v", likes, r.Skipped)
		case wantSkip != "" && (len(r.Skipped) != 1 || !strings.Contains(r.Skipped[0].Reason, wantSkip)):
			t.Errorf("counter reads %v: skipped %+v, want %q", likes, r.Skipped, wantSkip)
		}
	}
	t.Run("exact", func(t *testing.T) { f(t, []uint64{3}, 0, false, false, "") })
	t.Run("a delta in flight arrives", func(t *testing.T) { f(t, []uint64{2, 3}, 0, false, false, "") })
	t.Run("keeps moving", func(t *testing.T) { f(t, []uint64{4, 5, 6, 7, 8, 9, 10}, 0, false, false, "not the same way twice") })
	t.Run("drift", func(t *testing.T) { f(t, []uint64{5}, 0, false, true, "") })
	t.Run("a stage's outbox is not acknowledged", func(t *testing.T) { f(t, []uint64{5}, 1, true, false, "did not catch up") })
	// Busy for ever, as under a steady load, but all it committed is acknowledged.
	t.Run("a busy stage", func(t *testing.T) { f(t, []uint64{5}, 1, false, true, "") })
}

// TestAuditRemotePartition: the owner of the event stages audits ids of a counter
// partition owned by another process (its lag and its counts asked over NATS), called
// without a deadline as the background sampler calls it.
func TestAuditRemotePartition(t *testing.T) {
	s := natstest.Start(t)
	const n = 2
	events := startNode(t, s, openDB(t), n, 5*time.Second, 0)
	startNode(t, s, openDB(t), n, 5*time.Second, 1)
	var id pipeline.ID = 1
	for pipeline.PartitionOf(id, n) != 1 {
		id++
	}
	r, err := events.Audit(context.Background(), pipeline.AuditRequest{Posts: []pipeline.ID{id}})
	if err != nil {
		t.Fatal(err)
	}
	// memPart counts every id, and there are no relations: drift in like and comment.
	if len(r.Drift) != 2 || len(r.Skipped) != 0 || r.Drift[0].Counter != want(0, uint64(id), 0) {
		t.Fatalf("audit of post %d owned by another process = %+v, want drift in like and comment", id, r)
	}
}

// TestAuditSettlesRemoteStages: an audit answered by one process waits for the event
// stages of the others too: while another process's stage has not published what it
// committed, nothing is compared; once it is caught up, the audit compares.
func TestAuditSettlesRemoteStages(t *testing.T) {
	const n = 4
	_, nodes, _ := twoServers(t, n, 5*time.Second)
	const p = 3 // owned by nodes[1]
	audit := func(lag uint64) *pipeline.AuditReply {
		t.Helper()
		nodes[1].SetStage(p, &fakeStage{lag: lagging{lag}, pulled: nodes[1].stages[p].Pulled(), unacked: true})
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		r, err := nodes[0].Audit(ctx, pipeline.AuditRequest{Posts: []pipeline.ID{1001}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := audit(1); r.Checked != 0 || len(r.Skipped) != 1 || !strings.Contains(r.Skipped[0].Reason, "did not catch up") {
		t.Errorf("audit while another process's stage lags with its outbox unacknowledged: %+v, want skipped", r)
	}
	if r := audit(0); r.Checked != 2 || len(r.Skipped) != 0 || len(r.Drift) != 0 {
		t.Errorf("audit once it is caught up: %+v, want checked", r)
	}
}

// TestAuditWaitsForHops: a user's follower list changes where the hop batches sent to
// its partition are applied, here or in another process. While partition 3 (owned by
// the other process) has not applied every hop batch partition 0 had sent it — one of
// them held above a gap — its users are skipped as in flight, never compared, and the
// others are checked; once it has, they are checked too.
func TestAuditWaitsForHops(t *testing.T) {
	const n = 4
	_, nodes, _ := twoServers(t, n, 5*time.Second)
	put := func(nd *node, p int, st *stagelog.State) {
		t.Helper()
		if err := nd.db.Update(func(txn *cold.Txn) error { return stagelog.Put(txn, p, st) }); err != nil {
			t.Fatal(err)
		}
	}
	put(nodes[0], 0, &stagelog.State{HopSeqs: map[uint32]uint64{1: 2, 3: 5}}) // partition 0 sent 2 to 1, 5 to 3
	put(nodes[0], 1, &stagelog.State{Hops: map[uint32]*delivery.Mark{0: {Through: 2}}})
	put(nodes[1], 3, &stagelog.State{Hops: map[uint32]*delivery.Mark{0: {Through: 3, Held: []delivery.Held{{Seq: 5, Data: []byte{1}}}}}})
	var ids []pipeline.ID // a user of each partition
	for p := range n {
		id := pipeline.ID(1)
		for pipeline.PartitionOf(id, n) != p {
			id++
		}
		ids = append(ids, id)
	}
	audit := func(timeout time.Duration) *pipeline.AuditReply {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		r, err := nodes[0].Audit(ctx, pipeline.AuditRequest{Users: ids})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// The first attempt settles all but partition 3 (within settleWait, 3 s); the audit
	// ends before another.
	if r := audit(4500 * time.Millisecond); r.Checked != 6 || len(r.Drift) != 0 || len(r.Skipped) != 1 ||
		r.Skipped[0].ID != ids[3] || !strings.Contains(r.Skipped[0].Reason, "in flight") {
		t.Errorf("audit while partition 3 has not applied the hops sent to it = %+v, want user %d skipped in flight, 6 counters checked", r, ids[3])
	}
	put(nodes[1], 3, &stagelog.State{Hops: map[uint32]*delivery.Mark{0: {Through: 5}}})
	if r := audit(4500 * time.Millisecond); r.Checked != 8 || len(r.Drift) != 0 || len(r.Skipped) != 0 {
		t.Errorf("audit once partition 3 has applied them = %+v, want all 8 counters checked", r)
	}
}
