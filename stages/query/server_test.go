package query_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/embedded"
	"github.com/tally-dev/tally/pipeline/natstest"
	"github.com/tally-dev/tally/stages/flow"
	"github.com/tally-dev/tally/stages/query"
	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/unread"
)

// memPart stands in for a counter worker: it answers known counts per id (want) and
// refuses ids of another partition, so a request routed to the wrong partition fails.
type memPart struct {
	fi, p, n int           // family index, partition, partition count
	slow     bool          // answer only when ctx ends (a partition that does not answer)
	calls    *atomic.Int64 // Get calls, when set
}

// want is the count memPart gives field f of id in the family with index fi.
func want(fi int, id uint64, f int) uint64 { return id*100 + uint64(fi)*10 + uint64(f) }

func (m *memPart) Get(ctx context.Context, ids []uint64, out [][]uint64) error {
	if m.calls != nil {
		m.calls.Add(1)
	}
	if m.slow {
		<-ctx.Done()
		return fmt.Errorf("partition %d did not answer: %w", m.p, ctx.Err())
	}
	for i, id := range ids {
		if q := pipeline.PartitionOf(pipeline.ID(id), m.n); q != m.p {
			return fmt.Errorf("id %d of partition %d asked of partition %d", id, q, m.p)
		}
		for f := range out[i] {
			out[i][f] = want(m.fi, id, f)
		}
	}
	return nil
}
func (m *memPart) Ready() bool                                 { return true }
func (m *memPart) Behind(context.Context) (flow.Behind, error) { return flow.Behind{}, nil }

// fakeStage is an event stage as the queries see it: lagging by lag (nil: caught up),
// with the pulled authors its partition recorded.
type fakeStage struct {
	lag    query.Lagger
	pulled *unread.Pulled
	lapsed atomic.Bool // its lease may have lapsed (see Stage.Owned)
	// unacked: its one outbox entry is not known to be stored yet (see Stage.Outbox)
	unacked bool
}

func (f *fakeStage) Behind(ctx context.Context) (flow.Behind, error) {
	if f.lag == nil {
		return flow.Behind{}, nil
	}
	return f.lag.Behind(ctx)
}
func (f *fakeStage) Pulled() *unread.Pulled { return f.pulled }
func (f *fakeStage) Owned() bool            { return !f.lapsed.Load() }
func (f *fakeStage) Outbox() (last, oldest uint64) {
	if f.unacked {
		return 1, 1
	}
	return 1, 2
}

var families = pipeline.Families(pipeline.DefaultFamilies())

// node is one query.Server on its own NATS connection, as in one tallyd process.
type node struct {
	*query.Server
	nc      *nats.Conn
	db      *cold.DB
	parts   map[string][]query.Partition // every partition this node may own, registered or not
	stages  []query.Stage                // every event partition it may own, when it has a db
	gets    atomic.Int64                 // get requests it answered
	queries sync.Map                     // query kind → *atomic.Int64 of requests it answered
}

// answered is how many requests of kind (liked, likes.post, …) nd has answered.
func (nd *node) answered(kind string) int64 {
	n, _ := nd.queries.LoadOrStore(kind, new(atomic.Int64))
	return n.(*atomic.Int64).Load()
}

// openDB opens an empty Badger database for t (read by unread: no notices, no follows).
func openDB(t testing.TB) *cold.DB {
	t.Helper()
	db, err := cold.Open(cold.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// startNode starts a server owning the partitions in own (of every family) out of n, and
// their event stages (relations, unread, read from db) when db is set. A partition no
// server owns is answered unavailable at once (see startHandOver).
func startNode(t testing.TB, s *server.Server, db *cold.DB, n int, timeout time.Duration, own ...int) *node {
	t.Helper()
	return startHandOver(t, s, db, n, timeout, -1, own...)
}

// startHandOver is startNode with Config.HandOver handOver.
func startHandOver(t testing.TB, s *server.Server, db *cold.DB, n int, timeout, handOver time.Duration, own ...int) *node {
	t.Helper()
	return startWorkers(t, s, db, n, timeout, handOver, 2, own...)
}

// startWorkers is startHandOver with workers instances of the query service.
func startWorkers(t testing.TB, s *server.Server, db *cold.DB, n int, timeout, handOver time.Duration, workers int, own ...int) *node {
	t.Helper()
	nd := &node{nc: natstest.Connect(t, s), db: db, parts: map[string][]query.Partition{}}
	owners := map[string][]query.Partition{}
	for fi, f := range families {
		nd.parts[f.Name] = make([]query.Partition, n)
		owners[f.Name] = make([]query.Partition, n)
		for p := range n {
			nd.parts[f.Name][p] = &memPart{fi: fi, p: p, n: n}
		}
		for _, p := range own {
			owners[f.Name][p] = nd.parts[f.Name][p]
		}
	}
	cfg := query.Config{Subjects: pipeline.NewSubjects(""), Families: families, Partitions: n, Timeout: timeout, HandOver: handOver, Workers: workers,
		OnQuery: func(kind string, _ time.Duration, _ bool) {
			if kind == "get" {
				nd.gets.Add(1)
			}
			n, _ := nd.queries.LoadOrStore(kind, new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
		}}
	nd.Server = query.New(cfg, nd.nc, db, owners, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if db != nil { // the event stages of its partitions too
		for p := range n {
			pulled, err := unread.LoadPulled(db, p)
			if err != nil {
				t.Fatal(err)
			}
			nd.stages = append(nd.stages, &fakeStage{pulled: pulled})
		}
		for _, p := range own {
			nd.SetStage(p, nd.stages[p])
		}
	}
	if err := nd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nd.Stop)
	return nd
}

// setOwned registers (own) or removes the partitions ps of every family, and their event
// stages when nd has them.
func (nd *node) setOwned(own bool, ps ...int) {
	for _, p := range ps {
		if nd.stages == nil {
			break
		}
		if own {
			nd.SetStage(p, nd.stages[p])
		} else {
			nd.SetStage(p, nil)
		}
	}
	for _, f := range families {
		for _, p := range ps {
			var part query.Partition
			if own {
				part = nd.parts[f.Name][p]
			}
			nd.SetOwner(f.Name, p, part)
		}
	}
}

// get sends a plain MessagePack request to tally.get.post, as any client does.
func get(t testing.TB, nc *nats.Conn, subject string, ids []pipeline.ID) pipeline.GetReply {
	t.Helper()
	var r pipeline.GetReply
	ask(t, nc, subject, nil, pipeline.GetRequest{IDs: ids}, &r)
	return r
}

func askUnread(t testing.TB, nc *nats.Conn, uids []pipeline.ID) pipeline.UnreadReply {
	t.Helper()
	var u pipeline.UnreadReply
	ask(t, nc, "tally.unread", nil, pipeline.UnreadRequest{UIDs: uids}, &u)
	return u
}

// check fails unless r answers every id exactly, except those of the partitions in
// unavailable, which must be listed as unavailable (in order) with nil counts.
func check(t testing.TB, r pipeline.GetReply, ids []pipeline.ID, n int, unavailable ...int) {
	t.Helper()
	if r.Error != "" {
		t.Fatalf("error reply: %s", r.Error)
	}
	if !slices.Equal(r.Fields, families[0].Fields) || len(r.Counts) != len(ids) {
		t.Fatalf("fields %v, %d counts for %d ids", r.Fields, len(r.Counts), len(ids))
	}
	var wantUn []pipeline.ID
	for i, id := range ids {
		if slices.Contains(unavailable, pipeline.PartitionOf(id, n)) {
			wantUn = append(wantUn, id)
			if r.Counts[i] != nil {
				t.Errorf("id %d is unavailable but has counts %v", id, r.Counts[i])
			}
			continue
		}
		exp := []uint64{want(0, uint64(id), 0), want(0, uint64(id), 1), want(0, uint64(id), 2), want(0, uint64(id), 3)}
		if !slices.Equal(r.Counts[i], exp) {
			t.Errorf("id %d: counts %v, want %v", id, r.Counts[i], exp)
		}
	}
	if !slices.Equal(r.Unavailable, wantUn) {
		t.Errorf("unavailable %v, want %v", r.Unavailable, wantUn)
	}
}

// fromEach sends gets until each node has answered at least two, checking every reply.
// (OnQuery counts a get just after its reply is sent, so the last get of the previous
// call may be counted late: two cannot both be.)
func fromEach(t *testing.T, nc *nats.Conn, nodes []*node, ids []pipeline.ID, n int, unavailable ...int) {
	t.Helper()
	before := make([]int64, len(nodes))
	for i, nd := range nodes {
		before[i] = nd.gets.Load()
	}
	for range 500 {
		start := time.Now()
		check(t, get(t, nc, "tally.get.post", ids), ids, n, unavailable...)
		if took := time.Since(start); took > 2*time.Second {
			t.Fatalf("a get took %v: an unowned partition must be reported at once", took)
		}
		all := true
		for i, nd := range nodes {
			all = all && nd.gets.Load() >= before[i]+2
		}
		if all {
			return
		}
	}
	t.Fatal("500 gets, and not every server answered two")
}

// idsIn returns ids 1, 2, … until every one of n partitions has at least two.
func idsIn(n int) []pipeline.ID {
	seen := make([]int, n)
	var ids []pipeline.ID
	for id := pipeline.ID(1); slices.Min(seen) < 2; id++ {
		seen[pipeline.PartitionOf(id, n)]++
		ids = append(ids, id)
	}
	return ids
}

// TestScatterGather runs two servers on one NATS, each owning half of the partitions.
func TestScatterGather(t *testing.T) {
	const n = 4
	s := natstest.Start(t)
	client := natstest.Connect(t, s)
	timeout := 10 * time.Second // far above what an unowned partition may take
	db := openDB(t)
	a := startNode(t, s, db, n, timeout, 0, 1)
	b := startNode(t, s, db, n, timeout, 2, 3)
	nodes := []*node{a, b}
	ids := idsIn(n)

	// Every id answered exactly, whichever server takes the request.
	fromEach(t, client, nodes, ids, n)
	u := askUnread(t, client, ids)
	if u.Error != "" || len(u.Users) != len(ids) {
		t.Fatalf("unread: %+v", u)
	}
	for i, id := range ids {
		w := func(f int) uint64 { return want(2, uint64(id), f) } // comment, mention, like, dm, feed
		exp := pipeline.Unread{Comment: w(0), Mention: w(1), Like: w(2), DM: w(3), Feed: w(4)}
		if u.Users[i] != exp {
			t.Errorf("unread of %d: %+v, want %+v", id, u.Users[i], exp)
		}
	}

	// b hands partitions 2 and 3 over to nobody: their ids are unavailable, at once.
	b.setOwned(false, 2, 3)
	fromEach(t, client, nodes, ids, n, 2, 3)

	// Health checks only what each server owns: 2 event stages and 3 families × 2
	// partitions, then nothing.
	for i, wantChecked := range []int{8, 0} {
		h, err := nodes[i].Health(context.Background())
		if err != nil || !h.OK || h.Checked != wantChecked || h.Partitions != n {
			t.Errorf("server %d health: %+v %v, want ok with %d checked", i, h, err, wantChecked)
		}
	}

	// Only unavailable partitions asked: an error, not a reply of nothing.
	var only []pipeline.ID
	for _, id := range ids {
		if pipeline.PartitionOf(id, n) >= 2 {
			only = append(only, id)
		}
	}
	r := get(t, client, "tally.get.post", only)
	if r.Error == "" || r.Counts != nil || r.Unavailable != nil {
		t.Errorf("all unavailable: %+v, want an error", r)
	}

	// Unread never answers partial numbers.
	u = askUnread(t, client, ids)
	wantErr := fmt.Sprintf("unavailable: %d of %d uids are unavailable: their partition is being handed over between processes (or its owner does not answer); retry shortly", len(only), len(ids))
	if u.Error != wantErr || u.Users != nil {
		t.Errorf("unread with unavailable uids: %+v, want error %q", u, wantErr)
	}

	// a takes them over: exact again, with a answering them locally and b remotely.
	a.setOwned(true, 2, 3)
	fromEach(t, client, nodes, ids, n)

	// a gives them back to b (during a hand-over both may own them for a moment).
	b.setOwned(true, 2, 3)
	a.setOwned(false, 2, 3)
	fromEach(t, client, nodes, ids, n)

	// A request to a partition's subject with an id of another partition is refused.
	foreign := ids[slices.IndexFunc(ids, func(id pipeline.ID) bool { return pipeline.PartitionOf(id, n) == 2 })]
	r = get(t, client, "tally.part.post.0", []pipeline.ID{foreign})
	if want := fmt.Sprintf("bad request: id %d is in partition 2 of 4, not 0", foreign); r.Error != want || r.Counts != nil {
		t.Errorf("foreign id on tally.part.post.0: %+v, want error %q", r, want)
	}
	// And one with its own ids is answered.
	own := ids[slices.IndexFunc(ids, func(id pipeline.ID) bool { return pipeline.PartitionOf(id, n) == 0 })]
	check(t, get(t, client, "tally.part.post.0", []pipeline.ID{own}), []pipeline.ID{own}, n)
}

// TestRemoteTimeout: a partition whose owner does not answer within the request timeout
// is unavailable; the rest of the reply stands.
func TestRemoteTimeout(t *testing.T) {
	const n = 4
	s := natstest.Start(t)
	client := natstest.Connect(t, s)
	a := startNode(t, s, nil, n, 300*time.Millisecond, 0, 1, 2)
	b := startNode(t, s, nil, n, 300*time.Millisecond)
	var calls atomic.Int64
	b.SetOwner("post", 3, &memPart{fi: 0, p: 3, n: n, slow: true, calls: &calls})
	ids := idsIn(n)
	start := time.Now()
	// a asks b for partition 3 and gives up at its timeout; b asks its own partition 3,
	// which gives up at b's: the same reply either way.
	fromEach(t, client, []*node{a, b}, ids, n, 3)
	if took := time.Since(start); took < 2*300*time.Millisecond {
		t.Errorf("two gets took %v, want each to wait for the 300ms timeout", took)
	}
	if calls.Load() < 2 {
		t.Errorf("the slow partition was asked %d times, want one per get", calls.Load())
	}
}

// BenchmarkGetRemote times a 20-id get on tally.get.post answered with every partition
// in the answering process (local) and with half of them in another process
// (half-remote: two servers, each owning 8 of 16 partitions and asking the other for the
// rest over NATS).
func BenchmarkGetRemote(b *testing.B) {
	const n = 16
	ids := make([]pipeline.ID, 20)
	for i := range ids {
		ids[i] = pipeline.ID(1_000_003 * (i + 1))
	}
	for _, bc := range []struct {
		name string
		own  [][]int // partitions of each server
	}{
		{"local", [][]int{{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}}},
		{"half-remote", [][]int{{0, 1, 2, 3, 4, 5, 6, 7}, {8, 9, 10, 11, 12, 13, 14, 15}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s := natstest.Start(b)
			client := natstest.Connect(b, s)
			for _, own := range bc.own {
				startNode(b, s, nil, n, 5*time.Second, own...)
			}
			parts := map[int]bool{}
			for _, id := range ids {
				parts[pipeline.PartitionOf(id, n)] = true
			}
			check(b, get(b, client, "tally.get.post", ids), ids, n)
			data, _ := pipeline.Marshal(pipeline.GetRequest{IDs: ids}, false)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := client.Request("tally.get.post", data, 5*time.Second); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(parts)), "partitions/get")
		})
	}
}

// A get of a partition in hand-over — one process has let it go, the next has not
// started it yet — waits for the next owner (within HandOver) rather than answer its ids
// unavailable.
// TestWaitingGetHoldsUpNoOther: an exact get of a partition nobody serves waits out a
// hand-over (HandOver); meanwhile the same process, with one instance of the query
// service, answers a plain get of its own partitions, and only then is the partition
// taken, which the exact get waited for. Before, an instance answered one request at a
// time: the plain get waited behind the exact one, which waited for a take-over that
// came only after the plain get, so it ran out its HandOver and answered the partition
// unavailable. A plain get queued so during a kill's hand-over timed out where a standby
// would have answered it at once (TestKillReadsStale failed 2 runs in 3).
func TestWaitingGetHoldsUpNoOther(t *testing.T) {
	const n = 4
	s := natstest.Start(t)
	client := natstest.Connect(t, s)
	nd := startWorkers(t, s, nil, n, 25*time.Second, 15*time.Second, 1, 0, 1, 2) // partition 3: nobody's yet
	var mine, nobodys []pipeline.ID
	for _, id := range idsIn(n) {
		if pipeline.PartitionOf(id, n) == 3 {
			nobodys = append(nobodys, id)
		} else {
			mine = append(mine, id)
		}
	}
	data, err := pipeline.Marshal(pipeline.GetRequest{IDs: nobodys, Exact: true}, false)
	if err != nil {
		t.Fatal(err)
	}
	exact := make(chan pipeline.GetReply, 1)
	go func() {
		m, err := client.Request("tally.get.post", data, 30*time.Second)
		var r pipeline.GetReply
		if err == nil {
			err = pipeline.Unmarshal(m.Data, false, &r)
		}
		if err != nil {
			r.Error = err.Error()
		}
		exact <- r
	}()
	time.Sleep(300 * time.Millisecond) // the exact get is waiting out the hand-over
	check(t, get(t, client, "tally.get.post", mine), mine, n)
	nd.setOwned(true, 3) // the hand-over ends
	check(t, <-exact, nobodys, n)
}

// TestSlowErrorKeepsServiceHeaders: an answer slower than an instance waits for (an
// exact get that runs out its hand-over) is sent past micro, with the same error body
// and the Nats-Service-Error headers micro would have set.
func TestSlowErrorKeepsServiceHeaders(t *testing.T) {
	const n = 4
	s := natstest.Start(t)
	client := natstest.Connect(t, s)
	startWorkers(t, s, nil, n, 10*time.Second, 300*time.Millisecond, 1, 0, 1, 2)
	var nobodys []pipeline.ID
	for _, id := range idsIn(n) {
		if pipeline.PartitionOf(id, n) == 3 {
			nobodys = append(nobodys, id)
		}
	}
	var r pipeline.GetReply
	m := ask(t, client, "tally.get.post", nil, pipeline.GetRequest{IDs: nobodys, Exact: true}, &r)
	if r.Code != pipeline.CodeUnavailable || m.Header.Get(micro.ErrorCodeHeader) != "503" || !strings.Contains(m.Header.Get(micro.ErrorHeader), "unavailable") {
		t.Fatalf("reply %+v, headers %v; want unavailable with the service error headers", r, m.Header)
	}
}

func TestGetWaitsOutHandOver(t *testing.T) {
	const n = 4
	s := natstest.Start(t)
	client := natstest.Connect(t, s)
	a := startHandOver(t, s, nil, n, 5*time.Second, 0, 0, 1) // the default HandOver
	b := startHandOver(t, s, nil, n, 5*time.Second, 0, 2, 3)
	ids := idsIn(n)
	check(t, get(t, client, "tally.get.post", ids), ids, n)
	b.setOwned(false, 3) // stopped in b…
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		time.Sleep(200 * time.Millisecond)
		a.setOwned(true, 3) // …and started in a, a moment later
	})
	check(t, get(t, client, "tally.get.post", ids), ids, n)
}

// TestReplyTooLargeForNATS: a reply larger than the NATS server takes (its max_payload)
// is answered with an error saying so, where NATS refused it and the asker only saw its
// request time out.
func TestReplyTooLargeForNATS(t *testing.T) {
	s, err := embedded.Start(embedded.Config{Host: "127.0.0.1", Port: -1, StoreDir: t.TempDir(), MaxPayload: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	nc := natstest.Connect(t, s)
	startNode(t, s, openDB(t), 1, 5*time.Second, 0)
	var few, many pipeline.GetRequest
	for id := range pipeline.ID(1000) {
		if id < 10 {
			few.IDs = append(few.IDs, id+1)
		}
		many.IDs = append(many.IDs, id+1)
	}
	var r pipeline.GetReply
	if ask(t, nc, "tally.get.post", nil, &few, &r); r.Error != "" || len(r.Counts) != len(few.IDs) {
		t.Fatalf("get of %d ids: %+v", len(few.IDs), r)
	}
	r = pipeline.GetReply{}
	if ask(t, nc, "tally.get.post", nil, &many, &r); r.Code != pipeline.CodeBadRequest || !strings.Contains(r.Error, "max_payload") {
		t.Fatalf("get of %d ids on a server of 16 KiB payloads: error %q (%s), want one naming max_payload", len(many.IDs), r.Error, r.Code)
	}
}
