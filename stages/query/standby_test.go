package query_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/natstest"
	"github.com/tally-dev/tally/stages/flow"
)

// memStandby is a standby's counter worker as the query server sees it: it answers
// want's counts plus 1 (so that a test tells its answer from the owner's), behind by
// behind, once loaded.
type memStandby struct {
	memPart
	loaded atomic.Bool
	behind flow.Behind
	calls  atomic.Int64
}

func (m *memStandby) Ready() bool { return m.loaded.Load() }

func (m *memStandby) Stale(ctx context.Context, ids []uint64, out [][]uint64) (flow.Behind, error) {
	m.calls.Add(1)
	if err := m.memPart.Get(ctx, ids, out); err != nil {
		return flow.Behind{}, err
	}
	for _, c := range out {
		for f := range c {
			c[f]++
		}
	}
	return m.behind, nil
}

// getExact is get with GetRequest.Exact.
func getExact(t testing.TB, nc *nats.Conn, subject string, ids []pipeline.ID, exact bool) pipeline.GetReply {
	t.Helper()
	data, err := pipeline.Marshal(pipeline.GetRequest{IDs: ids, Exact: exact}, false)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := nc.Request(subject, data, 30*time.Second)
	if err != nil {
		t.Fatalf("%s: %v", subject, err)
	}
	var r pipeline.GetReply
	if err := pipeline.Unmarshal(msg.Data, false, &r); err != nil {
		t.Fatalf("%s: cannot decode the reply: %v", subject, err)
	}
	return r
}

// TestStandbyAnswersWhileUnowned: while partition 2 has no owner (its owner gone, before
// its standby takes it over), a get answers its ids from the standby, listed in stale
// with their positions and how far behind the standby was, rather than unavailable; a
// get with exact still finds them unavailable, and so does one while the standby has
// not loaded. Before, every get listed them unavailable.
func TestStandbyAnswersWhileUnowned(t *testing.T) {
	const n = 4
	s := natstest.Start(t)
	client := natstest.Connect(t, s)
	handOver := 300 * time.Millisecond
	a := startHandOver(t, s, nil, n, 10*time.Second, handOver, 0, 1)
	b := startHandOver(t, s, nil, n, 10*time.Second, handOver, 2, 3)
	ids := idsIn(n)
	sb := &memStandby{memPart: memPart{fi: 0, p: 2, n: n}, behind: flow.Behind{Msgs: 3, Age: 249_500 * time.Microsecond}}
	a.SetStandby("post", 2, sb)

	// Owned: the owner answers, never the standby.
	r := getExact(t, client, "tally.get.post", ids, false)
	check(t, r, ids, n)
	if r.Stale != nil || sb.calls.Load() != 0 {
		t.Fatalf("an owned partition answered stale %+v by its standby (%d calls)", r.Stale, sb.calls.Load())
	}

	// b is killed as far as partition 2 goes: no process serves it.
	b.setOwned(false, 2)
	// A standby not loaded yet answers nothing.
	check(t, getExact(t, client, "tally.get.post", ids, false), ids, n, 2)

	sb.loaded.Store(true)
	for _, srv := range []*node{a, b} { // whichever server takes the get
		r := getExact(t, srv.nc, "tally.get.post", ids, false)
		if r.Error != "" || len(r.Unavailable) != 0 || len(r.Counts) != len(ids) {
			t.Fatalf("without exact: %+v, want every id counted", r)
		}
		var stale []pipeline.ID
		var at []int
		for i, id := range ids {
			d := uint64(0)
			if pipeline.PartitionOf(id, n) == 2 {
				d = 1 // the standby's
				stale, at = append(stale, id), append(at, i)
			}
			exp := []uint64{want(0, uint64(id), 0) + d, want(0, uint64(id), 1) + d, want(0, uint64(id), 2) + d, want(0, uint64(id), 3) + d}
			if !slices.Equal(r.Counts[i], exp) {
				t.Errorf("id %d: counts %v, want %v", id, r.Counts[i], exp)
			}
		}
		wantStale := []pipeline.Stale{{IDs: stale, At: at, BehindMs: 250, BehindMsgs: 3}}
		if len(r.Stale) != 1 || !slices.Equal(r.Stale[0].IDs, stale) || !slices.Equal(r.Stale[0].At, at) ||
			r.Stale[0].BehindMs != 250 || r.Stale[0].BehindMsgs != 3 {
			t.Errorf("stale %+v, want %+v", r.Stale, wantStale)
		}
	}

	// Exact: the standby is not asked, the ids are unavailable as before.
	calls := sb.calls.Load()
	check(t, getExact(t, client, "tally.get.post", ids, true), ids, n, 2)
	if sb.calls.Load() != calls {
		t.Errorf("an exact get asked the standby")
	}

	// The standby takes the partition over: it answers as the owner, nothing stale.
	a.DropStandby("post", 2, sb)
	a.SetOwner("post", 2, &sb.memPart)
	r = getExact(t, client, "tally.get.post", ids, false)
	check(t, r, ids, n)
	if r.Stale != nil {
		t.Errorf("stale %+v once owned", r.Stale)
	}
}
