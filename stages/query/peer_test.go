package query_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/natstest"
	"github.com/tally-dev/tally/stages/query"
)

// TestPeerRequestsSkipUnknownFields: a request from another tallyd (to a partition's
// owner or its standby) with a field this one does not know — one a newer version adds,
// in a rolling upgrade — is answered, in MessagePack and JSON; a client's request with
// the same field is still refused naming it, so that a typo is never dropped. Before,
// the peer's request was a bad request too.
func TestPeerRequestsSkipUnknownFields(t *testing.T) {
	const n = 4
	s := natstest.Start(t)
	client := natstest.Connect(t, s)
	a := startNode(t, s, nil, n, 10*time.Second, 0, 1, 3)
	sb := &memStandby{memPart: memPart{fi: 0, p: 2, n: n}}
	sb.loaded.Store(true)
	a.SetStandby("post", 2, sb)
	ids := idsIn(n)
	in := func(p int) pipeline.ID {
		return ids[slices.IndexFunc(ids, func(id pipeline.ID) bool { return pipeline.PartitionOf(id, n) == p })]
	}
	ask := func(subject string, id pipeline.ID, asJSON bool) pipeline.GetReply {
		t.Helper()
		data, err := pipeline.Marshal(map[string]any{"ids": []pipeline.ID{id}, "added_later": 7}, asJSON)
		if err != nil {
			t.Fatal(err)
		}
		msg, err := client.Request(subject, data, 30*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", subject, err)
		}
		var r pipeline.GetReply
		if err := pipeline.UnmarshalReply(msg.Data, asJSON, &r); err != nil {
			t.Fatalf("%s: cannot decode the reply: %v", subject, err)
		}
		return r
	}
	for _, asJSON := range []bool{false, true} {
		id := in(0)
		check(t, ask("tally.part.post.0", id, asJSON), []pipeline.ID{id}, n)
		id = in(2)
		r := ask("tally.standby.post.2", id, asJSON)
		if w := []uint64{want(0, uint64(id), 0) + 1, want(0, uint64(id), 1) + 1, want(0, uint64(id), 2) + 1, want(0, uint64(id), 3) + 1}; r.Error != "" ||
			len(r.Counts) != 1 || !slices.Equal(r.Counts[0], w) || len(r.Stale) != 1 {
			t.Errorf("standby, JSON %v: %+v, want counts %v, stale", asJSON, r, w)
		}
		r = ask("tally.get.post", in(0), asJSON)
		if !strings.Contains(r.Error, `unknown field "added_later"`) {
			t.Errorf("a client's get with an unknown field, JSON %v: %+v, want it refused naming the field", asJSON, r)
		}
	}
}

// TestPeerAskedOnce: a get asks another process for all of its partitions in one
// request once it has learned that process serves them (from its replies on each
// partition's subject), and stays exact while what it learned goes stale: a partition
// moved to a third process is answered unavailable by the first and asked on its own
// subject, a process stopped has no responders, and a partition nobody serves is
// answered unavailable. Before, each of the other's partitions was a request of its own
// in every get.
func TestPeerAskedOnce(t *testing.T) {
	const n = 8
	s := natstest.Start(t)
	client := natstest.Connect(t, s)
	a := startNode(t, s, nil, n, 10*time.Second, 0, 1, 2, 3)
	b := startNode(t, s, nil, n, 10*time.Second, 4, 5, 6, 7)
	ids := idsIn(n)
	asked := func(nodes ...*node) (parts, peers int64) {
		for _, nd := range nodes {
			parts, peers = parts+nd.answered("part"), peers+nd.answered("peer")
		}
		return parts, peers
	}

	// Each server learns the other's four partitions from one get, asking each on its
	// subject; every later get asks the other once.
	fromEach(t, client, []*node{a, b}, ids, n)
	parts, peers := asked(a, b)
	gets := a.gets.Load() + b.gets.Load()
	if parts > 2*4 || peers < gets-2 {
		t.Fatalf("%d gets asked %d partitions and %d processes: want at most 8 partitions (learning), every other get one process", gets, parts, peers)
	}

	// Partition 7 moves to c: b answers its ids unavailable, and the asker asks them on
	// 7's subject, of c (one partition: its own subject is one request too).
	c := startNode(t, s, nil, n, 10*time.Second)
	b.setOwned(false, 7)
	c.setOwned(true, 7)
	fromEach(t, client, []*node{a, b, c}, ids, n)

	// b stops: its partitions are answered unavailable (no hand-over wait here) until c
	// owns them; then, once learned, a get asks each process once and no partition on
	// its own subject.
	b.Stop()
	fromEach(t, client, []*node{a, c}, ids, n, 4, 5, 6)
	c.setOwned(true, 4, 5, 6)
	fromEach(t, client, []*node{a, c}, ids, n)
	parts, peers = asked(a, c)
	gets = a.gets.Load() + c.gets.Load()
	fromEach(t, client, []*node{a, c}, ids, n)
	parts2, peers2 := asked(a, c)
	gets2 := a.gets.Load() + c.gets.Load()
	if parts2 != parts || peers2-peers != gets2-gets {
		t.Errorf("%d gets, all learned, asked %d partitions and %d processes: want none and one each", gets2-gets, parts2-parts, peers2-peers)
	}
}

// TestSilentPeerForgotten: a process that answered partitions on their subjects and then
// does not answer a request for several at once — paused, as a frozen VM is, its
// subscriptions still on the NATS server — holds a get up no longer than peerPatience:
// the partitions are asked on their own subjects, where their owners answer, and that
// process is not asked for several again. Before, the get waited out its timeout.
func TestSilentPeerForgotten(t *testing.T) {
	const n = 4
	s := natstest.Start(t)
	client := natstest.Connect(t, s)
	a := startNode(t, s, nil, n, 10*time.Second, 0, 1)
	// Partitions 2 and 3 answered by a stand-in whose replies name the peer token
	// "paused", on which nothing answers.
	nc := natstest.Connect(t, s)
	for p := 2; p < n; p++ {
		standIn(t, nc, p, n, nats.Header{"Tally-Peer": []string{"paused"}}, nil)
	}
	var silent atomic.Int64
	if _, err := nc.QueueSubscribe("tally.part.*.peer.paused", query.PartQueueGroup, func(*nats.Msg) { silent.Add(1) }); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	ids := idsIn(n)
	for i := range 5 {
		start := time.Now()
		check(t, get(t, client, "tally.get.post", ids), ids, n)
		if took := time.Since(start); took > 2*time.Second {
			t.Fatalf("get %d took %v: a silent process held it up", i, took)
		}
	}
	if got := silent.Load(); got != 1 {
		t.Errorf("the silent process was asked for several partitions %d times, want once (then not learned again for a while)", got)
	}
	_ = a
}

// A read of a partition lost inside NATS — routed to a server as it stopped, or answered
// through one — is sent once more after partPatience, and answered, where it waited out
// the whole of the get's time (TestReadsThroughNATSServerLoss: a get given 1 s failed).
// Here the first request partition 2's owner receives goes unanswered.
func TestLostPartRequestAskedAgain(t *testing.T) {
	const n = 4
	s := natstest.Start(t)
	client := natstest.Connect(t, s)
	startNode(t, s, nil, n, 10*time.Second, 0, 1, 3) // partitions 0, 1 and 3
	nc := natstest.Connect(t, s)
	var asked atomic.Int64
	standIn(t, nc, 2, n, nil, func() bool { return asked.Add(1) > 1 }) // the first lost on the way
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	ids := idsIn(n)
	start := time.Now()
	check(t, get(t, client, "tally.get.post", ids), ids, n)
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the get took %v: its lost request to partition 2 waited out the get's time", took)
	}
	if got := asked.Load(); got != 2 {
		t.Errorf("partition 2 asked %d times, want twice: the lost request, then once more", got)
	}
}

// standIn answers partition p of n's reads on its subject from a memPart, with header on
// each reply; a request for which answer (when set) says false goes unanswered.
func standIn(t *testing.T, nc *nats.Conn, p, n int, header nats.Header, answer func() bool) {
	part := &memPart{fi: 0, p: p, n: n}
	if _, err := nc.QueueSubscribe(fmt.Sprintf("tally.part.post.%d", p), query.PartQueueGroup, func(m *nats.Msg) {
		if answer != nil && !answer() {
			return
		}
		var req pipeline.GetRequest
		if err := pipeline.Unmarshal(m.Data, false, &req); err != nil {
			t.Error(err)
			return
		}
		ids := make([]uint64, len(req.IDs))
		out := make([][]uint64, len(req.IDs))
		for i, id := range req.IDs {
			ids[i], out[i] = uint64(id), make([]uint64, len(families[0].Fields))
		}
		if err := part.Get(context.Background(), ids, out); err != nil {
			t.Error(err)
			return
		}
		data, _ := pipeline.Marshal(pipeline.GetReply{Fields: families[0].Fields, Counts: out}, false)
		_ = m.RespondMsg(&nats.Msg{Subject: m.Reply, Data: data, Header: header})
	}); err != nil {
		t.Fatal(err)
	}
}
