package client_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/natstest"
)

// fakeTally answers gets as two tallyd processes a and b would, a serving the even of
// four partitions and b the odd: on the family's subject (any process; it names where
// the partitions are served when asked) and on each process's own subject. A count is
// the id times ten plus the field. A request the client sends again on the same inbox
// (its hedge, when an answer is slow) is answered again but not counted as asked.
type fakeTally struct {
	t      *testing.T
	nc     *nats.Conn
	n      int
	where  string // the WhereHeader a get asked on the family's subject is answered with
	mu     sync.Mutex
	asked  map[string]int       // requests by subject, each inbox once
	inbox  map[string]bool      // the inboxes of the requests counted in asked
	gone   map[pipeline.ID]bool // ids answered unavailable on the process's subject
	stale  map[pipeline.ID]bool // ids answered from a standby on the family's subject
	silent map[string]bool      // subjects not answered
	subs   map[string]*nats.Subscription
}

func startFakeTally(t *testing.T, nc *nats.Conn) *fakeTally {
	f := &fakeTally{t: t, nc: nc, n: 4, where: "4;a=0,2;b=1,3", asked: map[string]int{}, inbox: map[string]bool{}, gone: map[pipeline.ID]bool{},
		stale: map[pipeline.ID]bool{}, silent: map[string]bool{}, subs: map[string]*nats.Subscription{}}
	for _, subj := range []string{"tally.get.post", "tally.get.post.at.a", "tally.get.post.at.b"} {
		sub, err := nc.Subscribe(subj, f.answer)
		if err != nil {
			t.Fatal(err)
		}
		f.subs[subj] = sub
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fakeTally) answer(m *nats.Msg) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.inbox[m.Reply] {
		f.inbox[m.Reply] = true
		f.asked[m.Subject]++
	}
	if f.silent[m.Subject] {
		return
	}
	var req pipeline.GetRequest
	if err := pipeline.DecodeRequest(m.Data, false, &req); err != nil {
		f.t.Errorf("%s: %v", m.Subject, err)
		return
	}
	r := pipeline.GetReply{Fields: []string{"like", "view"}}
	front := m.Subject == "tally.get.post"
	for i, id := range req.IDs {
		p := pipeline.PartitionOf(id, f.n)
		mine := front || (m.Subject == "tally.get.post.at.a") == (p%2 == 0)
		if !mine || (!front && f.gone[id]) {
			r.Counts = append(r.Counts, nil)
			r.Unavailable = append(r.Unavailable, id)
			continue
		}
		r.Counts = append(r.Counts, []uint64{uint64(id) * 10, uint64(id)*10 + 1})
		if front && f.stale[id] {
			r.Stale = append(r.Stale, pipeline.Stale{IDs: []pipeline.ID{id}, At: []int{i}, BehindMs: 5})
		}
	}
	data, err := pipeline.Marshal(r, false)
	if err != nil {
		f.t.Error(err)
		return
	}
	reply := &nats.Msg{Subject: m.Reply, Data: data, Header: nats.Header{}}
	if front && m.Header.Get(pipeline.WhereHeader) != "" && f.where != "" {
		reply.Header.Set(pipeline.WhereHeader, f.where)
	}
	_ = m.RespondMsg(reply)
}

// took returns the requests each subject took since the last call.
func (f *fakeTally) took() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	got := f.asked
	f.asked = map[string]int{}
	return got
}

// unsubscribe stops answering subj, and returns once the server knows: a request sent
// after it finds no responders there.
func (f *fakeTally) unsubscribe(subj string) {
	if err := f.subs[subj].Unsubscribe(); err != nil {
		f.t.Fatal(err)
	}
	delete(f.subs, subj)
	if err := f.nc.Flush(); err != nil {
		f.t.Fatal(err)
	}
}

// reached is how many messages, hedges included, the subjects still answered have
// been handed since they were subscribed, once every message nc sent is (nc flushed
// first): what nc sent beside them reached no subscriber.
func (f *fakeTally) reached(nc *nats.Conn) uint64 {
	f.t.Helper()
	if err := nc.Flush(); err != nil {
		f.t.Fatal(err)
	}
	if err := f.nc.Flush(); err != nil {
		f.t.Fatal(err)
	}
	var n uint64
	natstest.Eventually(f.t, 5*time.Second, "the fake's subscriptions drained", func() (bool, string) {
		n = 0
		for subj, sub := range f.subs {
			if left, _, _ := sub.Pending(); left > 0 {
				return false, fmt.Sprint(left, " messages waiting on ", subj)
			}
			got, err := sub.Delivered()
			if err != nil {
				f.t.Fatal(err)
			}
			n += uint64(got)
		}
		return true, ""
	})
	return n
}

func (f *fakeTally) set(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn()
}

// idsOver is ids of every partition of n, in a mixed order.
func idsOver(n, count int) []uint64 {
	var ids []uint64
	for id := uint64(1); len(ids) < count; id++ {
		ids = append(ids, id*7919%100003)
	}
	for p := range n {
		if !slices.ContainsFunc(ids, func(id uint64) bool { return pipeline.PartitionOf(pipeline.ID(id), n) == p }) {
			panic(fmt.Sprint("no id in partition ", p))
		}
	}
	return ids
}

func checkCounts(t *testing.T, what string, r *pipeline.GetReply, ids []uint64) {
	t.Helper()
	if len(r.Counts) != len(ids) || len(r.Unavailable) > 0 {
		t.Fatalf("%s: %d counts for %d ids, unavailable %v", what, len(r.Counts), len(ids), r.Unavailable)
	}
	for i, id := range ids {
		if want := []uint64{id * 10, id*10 + 1}; !slices.Equal(r.Counts[i], want) {
			t.Fatalf("%s: id %d (at %d) counted %v, want %v", what, id, i, r.Counts[i], want)
		}
	}
	if !slices.Equal(r.Fields, []string{"like", "view"}) {
		t.Fatalf("%s: fields %v", what, r.Fields)
	}
}

// TestGetAsksEachProcessOnce: once a get has learned where a family's partitions are
// served (the first get's reply names them), the next gets ask each process for the ids
// of its partitions, once each and at once, and nothing of <prefix>.get.<family>: one
// round trip where the process reached asked the other, two in a row. The client stays
// exact as what it learned goes stale: ids a process answers unavailable (handed over),
// a process gone (no responders) or silent are asked on the family's subject within the
// same get, and the client learns again; a silent process is not asked again meanwhile.
// A tallyd that names no partitions (before 1.9) is asked as ever. Before, every get
// was asked on the family's subject.
func TestGetAsksEachProcessOnce(t *testing.T) {
	s := natstest.Start(t)
	f := startFakeTally(t, natstest.Connect(t, s))
	c, err := client.New(natstest.Connect(t, s))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ids := idsOver(4, 20)
	get := func(what string) {
		t.Helper()
		r, err := c.Get(ctx, "post", ids...)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		checkCounts(t, what, r, ids)
	}

	get("the first get")
	if got := f.took(); !maps1(got, "tally.get.post") {
		t.Fatalf("the first get asked %v, want the family's subject once", got)
	}
	for range 3 {
		get("a get learned")
	}
	if got := f.took(); got["tally.get.post.at.a"] != 3 || got["tally.get.post.at.b"] != 3 || got["tally.get.post"] != 0 {
		t.Fatalf("3 gets once learned asked %v, want each process 3 times and the family's subject never", got)
	}

	// b hands a partition over: its ids are answered unavailable there and asked on the
	// family's subject, which names where the partitions are served again.
	f.set(func() {
		for _, id := range ids {
			if pipeline.PartitionOf(pipeline.ID(id), 4) == 3 {
				f.gone[pipeline.ID(id)] = true
			}
		}
	})
	get("a get of a partition handed over")
	if got := f.took(); got["tally.get.post"] != 1 {
		t.Fatalf("a get of a partition handed over asked %v, want the family's subject once", got)
	}
	f.set(func() { clear(f.gone) })
	get("a get learned again")
	if got := f.took(); got["tally.get.post"] != 0 || got["tally.get.post.at.b"] != 1 {
		t.Fatalf("a get learned again asked %v", got)
	}

	// A stale count the family's subject answers is placed in the whole get.
	odd := slices.IndexFunc(ids, func(id uint64) bool { return pipeline.PartitionOf(pipeline.ID(id), 4)%2 == 1 })
	f.set(func() { f.gone[pipeline.ID(ids[odd])], f.stale[pipeline.ID(ids[odd])] = true, true })
	r, err := c.Get(ctx, "post", ids...)
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, "a get with a stale count", r, ids)
	if len(r.Stale) != 1 || !slices.Equal(r.Stale[0].At, []int{odd}) || r.Stale[0].IDs[0] != pipeline.ID(ids[odd]) {
		t.Fatalf("stale %+v, want id %d at %d", r.Stale, ids[odd], odd)
	}
	f.set(func() { clear(f.gone); clear(f.stale) })
	get("a get learning")
	f.took()

	// b gone: no responders, its ids asked on the family's subject at once.
	f.unsubscribe("tally.get.post.at.b")
	// The family's subject still names b (a tallyd whose user may not subscribe to its
	// subject would, for ever): b is not asked again while hushed. What the client sent
	// and no subscription took went to b.
	toB := func() func() uint64 {
		out, in := c.Conn().Stats().OutMsgs, f.reached(c.Conn())
		return func() uint64 { return c.Conn().Stats().OutMsgs - out - (f.reached(c.Conn()) - in) }
	}
	since := toB()
	get("a get of a process gone")
	if n := since(); n != 1 {
		t.Fatalf("a get of a process gone sent %d requests to b: want one", n)
	}
	since = toB()
	for range 3 {
		get("a get after")
	}
	if n := since(); n != 0 {
		t.Fatalf("3 gets with b hushed sent %d requests to b: want none", n)
	}
	if got := f.took(); got["tally.get.post.at.b"] > 0 || got["tally.get.post"] != 4 || got["tally.get.post.at.a"] != 4 {
		t.Fatalf("4 gets with b gone asked %v: want a and the family's subject 4 times each", got)
	}
	f.where = "4;a=0,2"

	// a silent (paused: subscribed, not answering): asked once, its ids answered on the
	// family's subject after directPatience, and not asked again while hushed though the
	// family's subject still names it.
	f.set(func() { f.silent["tally.get.post.at.a"] = true })
	t0 := time.Now()
	get("a get of a silent process")
	if took := time.Since(t0); took > 2*time.Second {
		t.Errorf("a get of a silent process took %v", took)
	}
	for range 3 {
		get("a get after a silent process")
	}
	// a is asked once (and sent the request once more a quarter into its patience, the
	// client's hedge); the first get asks the family's subject for the odd ids (b gone)
	// and the even (a silent), the next three for all.
	if got := f.took(); got["tally.get.post.at.a"] != 1 || got["tally.get.post"] != 5 {
		t.Fatalf("gets with a silent asked %v: want a once, the family's subject 5 times", got)
	}
}

// TestGetAsksOldTallydAsEver: a tallyd that does not name where the partitions are
// served (before 1.9), and a client made WithDirectGets(false), ask every get on the
// family's subject; the latter does not ask where they are either.
func TestGetAsksOldTallydAsEver(t *testing.T) {
	s := natstest.Start(t)
	f := startFakeTally(t, natstest.Connect(t, s))
	ids := idsOver(4, 20)
	var headers atomic.Int32
	spy, seen := natstest.Connect(t, s), map[string]bool{} // inboxes, a hedge's once
	if _, err := spy.Subscribe("tally.get.post", func(m *nats.Msg) {
		if m.Header.Get(pipeline.WhereHeader) != "" && !seen[m.Reply] {
			seen[m.Reply] = true
			headers.Add(1)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		where string
		opts  []client.Option
		asked int32
	}{
		{"before 1.9", "", nil, 3},
		{"WithDirectGets(false)", "4;a=0,2;b=1,3", []client.Option{client.WithDirectGets(false)}, 0},
	} {
		f.set(func() { f.where = tc.where })
		headers.Store(0)
		c, err := client.New(natstest.Connect(t, s), tc.opts...)
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			r, err := c.Get(context.Background(), "post", ids...)
			if err != nil {
				t.Fatal(err)
			}
			checkCounts(t, tc.name, r, ids)
		}
		if got := f.took(); !maps1(got, "tally.get.post") || got["tally.get.post"] != 3 {
			t.Errorf("%s: 3 gets asked %v, want the family's subject each time", tc.name, got)
		}
		natstest.Eventually(t, 5*time.Second, "the spy's count", func() (bool, string) {
			return headers.Load() == tc.asked, fmt.Sprint(headers.Load(), " asked where")
		})
	}
}

// TestGetUnavailableEverywhere: a get none of whose ids could be counted is an error
// wrapping ErrUnavailable, as before, when split between processes too.
func TestGetUnavailableEverywhere(t *testing.T) {
	s := natstest.Start(t)
	nc := natstest.Connect(t, s)
	if _, err := nc.Subscribe("tally.get.post", func(m *nats.Msg) {
		data, _ := pipeline.Marshal(pipeline.GetReply{Error: "unavailable: no partition of post could answer", Code: pipeline.CodeUnavailable}, false)
		reply := &nats.Msg{Subject: m.Reply, Data: data, Header: nats.Header{pipeline.WhereHeader: []string{"4;a=0,2;b=1,3"}}}
		_ = m.RespondMsg(reply)
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(natstest.Connect(t, s))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 { // the second with a Where learned? an error reply teaches nothing
		if _, err := c.Get(context.Background(), "post", idsOver(4, 20)...); !errors.Is(err, client.ErrUnavailable) {
			t.Fatalf("get %d: %v, want ErrUnavailable", i, err)
		}
	}
}

// maps1 reports whether m holds only key.
func maps1(m map[string]int, key string) bool {
	return len(m) == 1 && m[key] > 0
}
