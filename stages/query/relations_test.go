package query_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/natstest"
	"github.com/tally-dev/tally/stages/flow"
	"github.com/tally-dev/tally/stages/query"
	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/graph"
	"github.com/tally-dev/tally/store/unread"
)

// world is a small social graph written into the partitions' databases as the event
// stages write it, and the answers every query should give (the model).
type world struct {
	n        int
	liked    map[uint64][]uint64 // user → posts, newest first
	likers   map[uint64][]uint64 // post → users, newest first
	follows  map[uint64][]uint64 // user → followed, newest first
	fans     map[uint64][]uint64 // user → followers, newest first
	ts       map[[3]uint64]int64 // {kind, a, b} → time of the relation
	comments map[uint64]uint64   // post → comments
	unread   map[uint64]pipeline.Unread
}

const (
	users     = 40
	celebrity = 1 // the author whose posts are pulled
)

var posts = []uint64{1001, 1002, 1003, 1004, 1005}

// newWorld writes the world into dbs[owner(p)] for each partition p of n: likes, follows
// (the follower list in the followed user's partition), comments, and for unread the
// reader states, system notices, follows of the celebrity and the celebrity's pulled
// posts (in every partition).
func newWorld(t *testing.T, n int, dbs []*cold.DB, owner func(p int) int) *world {
	t.Helper()
	w := &world{n: n, liked: map[uint64][]uint64{}, likers: map[uint64][]uint64{}, follows: map[uint64][]uint64{},
		fans: map[uint64][]uint64{}, ts: map[[3]uint64]int64{}, comments: map[uint64]uint64{}, unread: map[uint64]pipeline.Unread{}}
	part := func(id uint64) int { return pipeline.PartitionOf(pipeline.ID(id), n) }
	update := func(p int, fn func(txn *cold.Txn) error) {
		t.Helper()
		if err := dbs[owner(p)].Update(fn); err != nil {
			t.Fatal(err)
		}
	}
	ts := int64(1_000)
	for u := uint64(1); u <= users; u++ {
		pu := part(u)
		var likes []uint64
		if u <= 20 {
			likes = append(likes, posts[0])
		}
		if u%3 != 0 && posts[1+u%4] != posts[0] {
			likes = append(likes, posts[1+u%4])
		}
		for _, post := range likes {
			ts++
			update(pu, func(txn *cold.Txn) error {
				_, err := graph.Relate(txn, pu, graph.Like, graph.Rel{A: u, B: post}, ts)
				return err
			})
			w.liked[u] = slices.Insert(w.liked[u], 0, post)
			w.likers[post] = slices.Insert(w.likers[post], 0, u)
			w.ts[[3]uint64{'l', u, post}] = ts
		}
		var followed []uint64
		if g := u*7%users + 1; g != u {
			followed = append(followed, g)
		}
		if u%2 == 0 && !slices.Contains(followed, celebrity) {
			followed = append(followed, celebrity)
		}
		for _, g := range followed {
			ts++
			r := graph.Rel{A: u, B: g}
			update(pu, func(txn *cold.Txn) error { _, err := graph.Relate(txn, pu, graph.Follow, r, ts); return err })
			update(part(g), func(txn *cold.Txn) error { return graph.AddFollower(txn, part(g), r, ts) })
			w.follows[u] = slices.Insert(w.follows[u], 0, g)
			w.fans[g] = slices.Insert(w.fans[g], 0, u)
			w.ts[[3]uint64{'f', u, g}] = ts
		}
		if u%4 == 0 {
			ts++
			update(pu, func(txn *cold.Txn) error {
				_, err := graph.Relate(txn, pu, graph.Comment, graph.Rel{A: u, B: posts[0], C: u}, ts)
				return err
			})
			w.comments[posts[0]]++
		}
		// Unread: system read up to place 10 (notices at 5, 15, 25: two unread); the
		// celebrity's pulled posts at 100, 200, 300 count after the feed read and the
		// follow (at 50 or 150).
		rs := unread.ReaderState{System: 10}
		if u%8 == 0 {
			rs.Feed = 250
		}
		var followSeq uint64 = 50
		if u%4 == 2 {
			followSeq = 150
		}
		update(pu, func(txn *cold.Txn) error {
			if u%2 == 0 {
				if err := unread.PutFollowed(txn, pu, celebrity, u, followSeq); err != nil {
					return err
				}
			}
			return unread.PutReader(txn, pu, u, rs)
		})
		un := pipeline.Unread{System: 2}
		if u%2 == 0 {
			for _, seq := range []uint64{100, 200, 300} {
				if seq > max(rs.Feed, followSeq) {
					un.Feed++
				}
			}
		}
		w.unread[u] = un
	}
	for p := range n {
		update(p, func(txn *cold.Txn) error {
			for _, seq := range []uint64{5, 15, 25} {
				if err := unread.PutNotice(txn, p, seq); err != nil {
					return err
				}
			}
			for _, seq := range []uint64{100, 200, 300} {
				if err := unread.PutPulled(txn, p, celebrity, seq); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return w
}

// ask sends req as MessagePack to subject (with header hdr, when set) and decodes the
// reply into reply; the reply's message is returned for its headers.
func ask(t testing.TB, nc *nats.Conn, subject string, hdr nats.Header, req, reply any) *nats.Msg {
	t.Helper()
	data, err := pipeline.Marshal(req, false)
	if err != nil {
		t.Fatal(err)
	}
	m, err := nc.RequestMsg(&nats.Msg{Subject: subject, Data: data, Header: hdr}, 30*time.Second)
	if err != nil {
		t.Fatalf("%s: %v", subject, err)
	}
	if err := pipeline.Unmarshal(m.Data, false, reply); err != nil {
		t.Fatalf("%s: cannot decode the reply: %v", subject, err)
	}
	return m
}

// fromBoth runs check until every node has answered at least one request of kind (the
// subject's kind as OnQuery names it), so that each answer is seen from each process.
func fromBoth(t *testing.T, nodes []*node, kind string, check func()) {
	t.Helper()
	before := make([]int64, len(nodes))
	for i, nd := range nodes {
		before[i] = nd.answered(kind)
	}
	for range 200 {
		check()
		if t.Failed() {
			return
		}
		all := true
		for i, nd := range nodes {
			all = all && nd.answered(kind) > before[i]
		}
		if all {
			return
		}
	}
	t.Fatalf("200 %s requests, and not every server answered one", kind)
}

// listAll pages through subject's list of id (key "uid" or "post") limit at a time, and
// returns every id and time, checking that no page is longer than limit.
func listAll(t *testing.T, nc *nats.Conn, subject, key string, id uint64, limit int) (ids []uint64, ts []int64) {
	t.Helper()
	req := pipeline.ListRequest{Limit: limit}
	for pages := 0; ; pages++ {
		if pages > 100 {
			t.Fatalf("%s %d: more than 100 pages", subject, id)
		}
		if key == "post" {
			req.Post = pipeline.ID(id)
		} else {
			req.UID = pipeline.ID(id)
		}
		var r pipeline.ListReply
		ask(t, nc, subject, nil, req, &r)
		if r.Error != "" {
			t.Fatalf("%s %d: %s", subject, id, r.Error)
		}
		if len(r.IDs) > limit || len(r.IDs) != len(r.TS) {
			t.Fatalf("%s %d: a page of %d ids and %d times, limit %d", subject, id, len(r.IDs), len(r.TS), limit)
		}
		for _, v := range r.IDs {
			u, err := strconv.ParseUint(fmt.Sprint(v), 10, 64)
			if err != nil {
				t.Fatalf("%s %d: id %v", subject, id, v)
			}
			ids = append(ids, u)
		}
		ts = append(ts, r.TS...)
		if r.Next == "" {
			return ids, ts
		}
		req.Before = r.Next
	}
}

// exactPart is a counter partition holding the counts the relations make (post likes and
// comments, user followers and following), with like of post off adds to its likes.
type exactPart struct {
	w    *world
	mu   sync.Mutex
	off  map[uint64]uint64
	post bool
}

func (e *exactPart) Get(_ context.Context, ids []uint64, out [][]uint64) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, id := range ids {
		clear(out[i])
		if e.post {
			out[i][0] = uint64(len(e.w.likers[id])) + e.off[id] // like
			out[i][2] = e.w.comments[id]                        // comment
		} else {
			out[i][0], out[i][1] = uint64(len(e.w.fans[id])), uint64(len(e.w.follows[id])) // follower, following
		}
	}
	return nil
}
func (e *exactPart) Ready() bool                                 { return true }
func (e *exactPart) Behind(context.Context) (flow.Behind, error) { return flow.Behind{}, nil }

// twoServers starts two servers on one NATS, each with its own database and half of n
// partitions (stage and counters), writes the world into them, and gives each the
// world's exact counters of post and user.
func twoServers(t *testing.T, n int, timeout time.Duration) (*world, []*node, *nats.Conn) {
	t.Helper()
	s := natstest.Start(t)
	dbs := []*cold.DB{openDB(t), openDB(t)}
	owner := func(p int) int { return p * 2 / n }
	w := newWorld(t, n, dbs, owner)
	var nodes []*node
	for i, db := range dbs {
		var own []int
		for p := range n {
			if owner(p) == i {
				own = append(own, p)
			}
		}
		nd := startNode(t, s, db, n, timeout, own...)
		for _, p := range own {
			nd.SetOwner("post", p, &exactPart{w: w, post: true})
			nd.SetOwner("user", p, &exactPart{w: w})
		}
		nodes = append(nodes, nd)
	}
	seen := map[int]bool{}
	for u := uint64(1); u <= users; u++ {
		seen[pipeline.PartitionOf(pipeline.ID(u), n)] = true
	}
	if len(seen) != n {
		t.Fatalf("users 1..%d are in %d partitions of %d", users, len(seen), n)
	}
	return w, nodes, natstest.Connect(t, s)
}

// TestRelationsAcrossServers: every relation query answers the same whichever of two
// servers receives it, each holding half of the partitions' state in its own database:
// liked, the lists (the likes of a post merged newest first from every partition, paged
// across partitions, the other server's two asked at once once learned), unread and the
// audit.
func TestRelationsAcrossServers(t *testing.T) {
	const n = 4
	w, nodes, nc := twoServers(t, n, 10*time.Second)
	sj := pipeline.NewSubjects("")

	fromBoth(t, nodes, "liked", func() {
		for u := uint64(1); u <= users; u++ {
			var r pipeline.LikedReply
			ask(t, nc, sj.Liked(), nil, pipeline.LikedRequest{UID: pipeline.ID(u), Posts: []pipeline.ID{1001, 1002, 1003, 1004, 1005, 7}}, &r)
			exp := make([]bool, 6)
			for i, post := range posts {
				exp[i] = slices.Contains(w.liked[u], post)
			}
			if r.Error != "" || !slices.Equal(r.Liked, exp) {
				t.Errorf("liked of user %d: %+v, want %v", u, r, exp)
			}
		}
	})

	lists := []struct {
		kind, subject, key string
		rel                byte
		ids                []uint64
		want               map[uint64][]uint64
		bySubject          bool
	}{
		{"likes.user", sj.LikesUser(), "uid", 'l', []uint64{1, 2, 3, 4, 5, 6, 7, 8}, w.liked, true},
		{"likes.post", sj.LikesPost(), "post", 'l', posts, w.likers, false},
		{"following", sj.Following(), "uid", 'f', []uint64{1, 2, 3, 4, 5, 6, 7, 8}, w.follows, true},
		{"followers", sj.Followers(), "uid", 'f', []uint64{celebrity, 2, 3, 8, 15, 22}, w.fans, false},
	}
	for _, l := range lists {
		fromBoth(t, nodes, l.kind, func() {
			for _, id := range l.ids {
				for _, limit := range []int{1, 3, 20} {
					got, ts := listAll(t, nc, l.subject, l.key, id, limit)
					if !slices.Equal(got, l.want[id]) {
						t.Fatalf("%s of %d by %d: %v, want %v", l.kind, id, limit, got, l.want[id])
					}
					for i, other := range got {
						k := [3]uint64{uint64(l.rel), id, other}
						if !l.bySubject {
							k = [3]uint64{uint64(l.rel), other, id}
						}
						if ts[i] != w.ts[k] {
							t.Errorf("%s of %d: %d at %d, want %d", l.kind, id, other, ts[i], w.ts[k])
						}
					}
				}
			}
		})
	}
	if nodes[0].answered("peer")+nodes[1].answered("peer") == 0 { // no get before: the lists'
		t.Error("no list asked the other server for its two event partitions at once (peers.go)")
	}
	if len(w.likers[posts[0]]) < 15 {
		t.Fatalf("post %d has %d likers: too few to page across partitions", posts[0], len(w.likers[posts[0]]))
	}

	fromBoth(t, nodes, "unread", func() {
		var uids []pipeline.ID
		for u := uint64(1); u <= users; u++ {
			uids = append(uids, pipeline.ID(u))
		}
		u := askUnread(t, nc, uids)
		if u.Error != "" || len(u.Users) != users {
			t.Fatalf("unread: %+v", u)
		}
		for i, got := range u.Users {
			id := uint64(uids[i])
			c := func(f int) uint64 { return want(2, id, f) } // memPart's unread counters
			exp := w.unread[id]
			exp.Comment, exp.Mention, exp.Like, exp.DM, exp.Feed = c(0), c(1), c(2), c(3), c(4)+exp.Feed
			if got != exp {
				t.Errorf("unread of %d: %+v, want %+v", id, got, exp)
			}
		}
	})

	audit := func(req pipeline.AuditRequest) pipeline.AuditReply {
		t.Helper()
		var r pipeline.AuditReply
		ask(t, nc, sj.Audit(), nil, req, &r)
		return r
	}
	fromBoth(t, nodes, "audit", func() {
		r := audit(pipeline.AuditRequest{Posts: []pipeline.ID{1001, 1002, 1003}, Users: []pipeline.ID{1, 2, 3, 4, 5, 6, 7, 8}})
		if r.Error != "" || r.Checked != 2*(3+8) || len(r.Drift) != 0 || len(r.Skipped) != 0 {
			t.Errorf("audit of exact counters: %+v, want every field checked, no drift", r)
		}
		r = audit(pipeline.AuditRequest{Sample: 5})
		if r.Error != "" || len(r.Posts) != 5 || len(r.Users) != 5 || r.Checked != 2*(5+5) || len(r.Drift) != 0 {
			t.Errorf("audit of a sample of 5: %+v, want 5 posts and 5 users, no drift", r)
		}
	})
	// A like counter off by 2: the relations, summed over both servers, say by how much.
	post := posts[0]
	pp := pipeline.PartitionOf(pipeline.ID(post), n)
	nodes[pp*2/n].SetOwner("post", pp, &exactPart{w: w, post: true, off: map[uint64]uint64{post: 2}})
	likes := uint64(len(w.likers[post]))
	fromBoth(t, nodes, "audit", func() {
		r := audit(pipeline.AuditRequest{Posts: []pipeline.ID{pipeline.ID(post)}})
		exp := []pipeline.Drift{{Family: "post", ID: pipeline.ID(post), Field: "like", Counter: likes + 2, Relations: likes}}
		if r.Error != "" || !slices.Equal(r.Drift, exp) {
			t.Errorf("audit of a drifted counter: %+v, want drift %+v", r, exp)
		}
	})
}

// TestRelationsUnavailable: a query that needs an event partition owned by no process,
// or whose owner does not answer in time, is answered unavailable by either server — all
// of it, never a part — and answered again once the partition is back; the owner refuses
// ids of another partition.
func TestRelationsUnavailable(t *testing.T) {
	const n = 4
	_, nodes, nc := twoServers(t, n, 300*time.Millisecond)
	sj := pipeline.NewSubjects("")
	in := func(p int) uint64 {
		for u := uint64(1); ; u++ {
			if pipeline.PartitionOf(pipeline.ID(u), n) == p {
				return u
			}
		}
	}
	var all []pipeline.ID
	for u := uint64(1); u <= users; u++ {
		all = append(all, pipeline.ID(u))
	}
	in3 := 0 // users of partition 3
	for _, u := range all {
		if pipeline.PartitionOf(u, n) == 3 {
			in3++
		}
	}
	type reply struct{ Error, Code string }
	// errOf asks and keeps only the error and its code of whatever reply.
	errOf := func(subject string, hdr nats.Header, req any) reply {
		t.Helper()
		var m map[string]any
		ask(t, nc, subject, hdr, req, &m)
		e, _ := m["error"].(string)
		c, _ := m["code"].(string)
		return reply{e, c}
	}
	// check asks every query (of the kinds in only, when given) from both servers: those
	// needing partition 3 get unavailable (and wantUnread as unread's error) when down,
	// the others an answer.
	check := func(down bool, wantUnread string, only ...string) {
		t.Helper()
		queries := []struct {
			kind, subject string
			req           any
			needs3        bool
		}{
			{"liked", sj.Liked(), pipeline.LikedRequest{UID: pipeline.ID(in(3)), Posts: []pipeline.ID{1001}}, true},
			{"liked", sj.Liked(), pipeline.LikedRequest{UID: pipeline.ID(in(0)), Posts: []pipeline.ID{1001}}, false},
			{"likes.post", sj.LikesPost(), pipeline.ListRequest{Post: 1001}, true},
			{"likes.user", sj.LikesUser(), pipeline.ListRequest{UID: pipeline.ID(in(2))}, false},
			{"following", sj.Following(), pipeline.ListRequest{UID: pipeline.ID(in(3))}, true},
			{"followers", sj.Followers(), pipeline.ListRequest{UID: pipeline.ID(in(3))}, true},
			{"unread", sj.Unread(), pipeline.UnreadRequest{UIDs: all}, true},
			{"unread", sj.Unread(), pipeline.UnreadRequest{UID: pipeline.ID(in(1))}, false},
			{"audit", sj.Audit(), pipeline.AuditRequest{Users: []pipeline.ID{1}}, true},
		}
		for _, q := range queries {
			if only != nil && (!slices.Contains(only, q.kind) || !q.needs3) {
				continue
			}
			fromBoth(t, nodes, q.kind, func() {
				r := errOf(q.subject, nil, q.req)
				switch {
				case down && q.needs3 && r.Code != pipeline.CodeUnavailable:
					t.Errorf("%s %+v with partition 3 down: %+v, want unavailable", q.kind, q.req, r)
				case down && q.kind == "unread" && q.needs3 && r.Error != wantUnread:
					t.Errorf("unread of every user with partition 3 down: %q, want %q", r.Error, wantUnread)
				case (!down || !q.needs3) && r.Error != "":
					t.Errorf("%s %+v (partition 3 down: %v): %+v, want an answer", q.kind, q.req, down, r)
				}
			})
		}
	}
	check(false, "")
	wantUnread := fmt.Sprintf("unavailable: %d of %d uids are unavailable: their partition is being handed over between processes (or its owner does not answer); retry shortly", in3, len(all))

	// Owned by no process: no responders.
	nodes[1].SetStage(3, nil)
	check(true, wantUnread)
	var h pipeline.HealthReply
	ask(t, nc, sj.Health(), nil, struct{}{}, &h)
	if h.Ready || !slices.Contains(h.NotReady, "event.3") {
		t.Errorf("health with event partition 3 owned by no process: %+v, want event.3 not ready", h)
	}

	// An owner that does not answer within the timeout (each ask waits for it: a few).
	sub, err := nc.QueueSubscribe(sj.PartEvents(3), query.PartQueueGroup, func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	check(true, wantUnread, "liked", "likes.post", "unread")
	if err := sub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil { // the silent owner gone before the next ask
		t.Fatal(err)
	}

	nodes[1].SetStage(3, nodes[1].stages[3])
	check(false, "")

	// The owner of a partition refuses ids of another, and queries it does not know.
	hdr := nats.Header{"Tally-Query": []string{"liked"}}
	r := errOf(sj.PartEvents(0), hdr, map[string]any{"id": in(2), "ids": []uint64{1001}})
	if exp := fmt.Sprintf("bad request: id %d is in partition 2 of 4, not 0", in(2)); r.Error != exp || r.Code != pipeline.CodeBadRequest {
		t.Errorf("a uid of partition 2 asked of partition 0: %+v, want %q", r, exp)
	}
	hdr.Set("Tally-Query", "drop")
	r = errOf(sj.PartEvents(0), hdr, map[string]any{"id": in(0)})
	if r.Code != pipeline.CodeBadRequest {
		t.Errorf("an unknown query of an event partition: %+v, want bad request", r)
	}
}

// A stage whose lease may have lapsed (a partition stopping here past its lease TTL,
// served until its workers have stopped) is not read: a relation query of it is asked
// of the partition's owner now, and, where none answers, comes back unavailable — not
// from this process's copy of the state, which the next owner may have moved past.
func TestLapsedStageNotRead(t *testing.T) {
	s := natstest.Start(t)
	nd := startHandOver(t, s, openDB(t), 1, 5*time.Second, 200*time.Millisecond, 0)
	ask1 := func() pipeline.LikedReply {
		var r pipeline.LikedReply
		ask(t, nd.nc, pipeline.NewSubjects("").Liked(), nil, pipeline.LikedRequest{UID: 1, Posts: []pipeline.ID{7}}, &r)
		return r
	}
	if r := ask1(); r.Error != "" || len(r.Liked) != 1 {
		t.Fatalf("liked of a partition owned here: %+v", r)
	}
	nd.stages[0].(*fakeStage).lapsed.Store(true)
	if r := ask1(); r.Code != pipeline.CodeUnavailable {
		t.Fatalf("liked of a partition whose lease may have lapsed here: %+v, want code %s", r, pipeline.CodeUnavailable)
	}
}
