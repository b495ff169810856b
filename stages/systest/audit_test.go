package systest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/stages/node"
	"github.com/tally-dev/tally/stages/systest/rig"
)

// auditReq sends an audit request in JSON and decodes the reply.
func auditReq(t *testing.T, nc *nats.Conn, req string) pipeline.AuditReply {
	t.Helper()
	m, err := nc.Request(pipeline.NewSubjects("").Audit(), []byte(req), 30*time.Second)
	if err != nil {
		t.Fatalf("audit %s: %v", req, err)
	}
	var r pipeline.AuditReply
	if err := pipeline.Unmarshal(m.Data, pipeline.IsJSON(m.Data, m.Header), &r); err != nil {
		t.Fatalf("audit %s: %v: %s", req, err, m.Data)
	}
	return r
}

// TestAudit: a clean node audits clean; drift introduced on purpose (incr events that
// bypass the relations) is found per id and field, repaired once through an incr event
// — a repeated repair of the same drift, concurrent or re-sent, counts once — and a
// second audit finds none; bad requests get an error; the sampler feeds the metrics.
func TestAudit(t *testing.T) {
	n, c := rig.StartNode(t, func(c *node.Config) {
		c.Metrics = "127.0.0.1:0"
		c.AuditEvery = 50 * time.Millisecond
		c.AuditSample = 20
	})
	ctx := context.Background()
	nc, err := nats.Connect(n.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	evs := []pipeline.Event{
		{Type: "like", UID: 1, Post: 100}, {Type: "like", UID: 2, Post: 100}, {Type: "like", UID: 3, Post: 100},
		{Type: "like", UID: 1, Post: 200}, {Type: "unlike", UID: 1, Post: 200}, {Type: "like", UID: 4, Post: 200},
		{Type: "comment", UID: 1, Post: 100, Comment: 1}, {Type: "comment", UID: 1, Post: 100, Comment: 2},
		{Type: "comment", UID: 2, Post: 100, Comment: 3}, {Type: "uncomment", UID: 1, Post: 100, Comment: 2},
		{Type: "follow", UID: 1, Target: 2}, {Type: "follow", UID: 3, Target: 2}, {Type: "follow", UID: 2, Target: 1},
		{Type: "unfollow", UID: 3, Target: 2}, {Type: "follow", UID: 4, Target: 2},
	}
	if err := c.PublishBatch(ctx, "audit", evs); err != nil {
		t.Fatal(err)
	}
	rig.WaitCaughtUp(t, c)

	clean := `{"posts":[100,200,"101"],"users":[1,2,3,4,5]}`
	if r := auditReq(t, nc, clean); r.Error != "" || len(r.Drift) != 0 || len(r.Skipped) != 0 || r.Checked != 3*2+5*2 {
		t.Fatalf("clean audit = %+v, want 16 counters checked, no drift, nothing skipped", r)
	}
	if body := scrape(t, n); !strings.Contains(body, "tally_audit_drift_total 0") || metric(body, "tally_audit_checked_total") == 0 {
		t.Fatalf("metrics of a clean node:\n%s", grep(body, "tally_audit"))
	}

	// Drift: counters moved without their relations.
	drift := []pipeline.Event{
		{Type: "incr", Family: "post", ID: 100, Field: "like", N: 2},
		{Type: "incr", Family: "post", ID: 200, Field: "comment", N: 1},
		{Type: "incr", Family: "user", ID: 2, Field: "follower", N: -1},
		{Type: "incr", Family: "post", ID: 100, Field: "view", N: 5}, // views have no relations: not audited
	}
	if err := c.Publish(ctx, drift...); err != nil {
		t.Fatal(err)
	}
	rig.WaitCaughtUp(t, c)
	want := []pipeline.Drift{
		{Family: "post", ID: 100, Field: "like", Counter: 5, Relations: 3},
		{Family: "post", ID: 200, Field: "comment", Counter: 1, Relations: 0},
		{Family: "user", ID: 2, Field: "follower", Counter: 1, Relations: 2},
	}
	r := auditReq(t, nc, clean)
	if r.Error != "" || !slices.Equal(r.Drift, want) || len(r.Skipped) != 0 {
		t.Fatalf("audit after drift = %+v\nwant drift %+v", r, want)
	}
	rig.Eventually(t, "the sampler counts drift", func() (bool, string) {
		body := scrape(t, n)
		return metric(body, "tally_audit_drift_total") > 0, grep(body, "tally_audit")
	})

	// Two repairing audits at once: each drift is corrected once.
	var wg sync.WaitGroup
	replies := make([]pipeline.AuditReply, 2)
	for i := range replies {
		wg.Go(func() { replies[i] = auditReq(t, nc, `{"posts":[100,200],"users":[2],"repair":true}`) })
	}
	wg.Wait()
	repaired := 0
	for _, r := range replies {
		if r.Error != "" {
			t.Fatalf("repair: %s", r.Error)
		}
		for _, d := range r.Drift {
			if !d.Repaired || d.Tx != pipeline.RepairMsgID(d.Family, d.ID, d.Field, d.Counter, d.Relations) {
				t.Errorf("drift %+v not repaired under its own id", d)
			}
			repaired++
		}
	}
	if repaired != len(want) { // the second audit saw the first one's repairs applied
		t.Errorf("%d repairs over two audits, want %d: %+v", repaired, len(want), replies)
	}
	// The same repair sent again (a retry after a lost ack) is dropped.
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	again := pipeline.Event{Type: "incr", Family: "post", ID: 100, Field: "like", N: -2}
	data, _ := pipeline.Marshal(&again, false)
	ack, err := js.Publish(ctx, pipeline.NewSubjects("").Event("incr", 100), data, jetstream.WithMsgID(pipeline.RepairMsgID("post", 100, "like", 5, 3)))
	if err != nil || !ack.Duplicate {
		t.Fatalf("re-sent repair: ack %+v, %v; want a duplicate", ack, err)
	}
	rig.WaitCaughtUp(t, c)
	checkCounts(t, c, "post", []uint64{100, 200}, [][]uint64{{3, 0, 2, 5}, {1, 0, 0, 0}})
	checkCounts(t, c, "user", []uint64{2}, [][]uint64{{2, 1, 0}})
	if r := auditReq(t, nc, clean); r.Error != "" || len(r.Drift) != 0 || len(r.Skipped) != 0 {
		t.Fatalf("audit after repair = %+v, want no drift", r)
	}
	if r := auditReq(t, nc, `{"sample":50}`); r.Error != "" || len(r.Drift) != 0 || !slices.Contains(r.Posts, 100) || !slices.Contains(r.Users, 2) {
		t.Fatalf("sampled audit = %+v, want posts 100 and 200 and users 1 2 4, no drift", r)
	}

	for _, bad := range []string{`{}`, `{"sample":5000}`, `{"sample":-1}`, `{"posts":"100"}`, `{"users":[-1]}`, "\xc1"} {
		if r := auditReq(t, nc, bad); r.Error == "" {
			t.Errorf("audit %q = %+v, want an error", bad, r)
		}
	}
}

func checkCounts(t *testing.T, c *client.Client, family string, ids []uint64, want [][]uint64) {
	t.Helper()
	r, err := c.Get(context.Background(), family, ids...)
	if err != nil {
		t.Fatal(err)
	}
	for i := range ids {
		if !slices.Equal(r.Counts[i], want[i]) {
			t.Errorf("%s %d = %v, want %v", family, ids[i], r.Counts[i], want[i])
		}
	}
}

func scrape(t *testing.T, n *node.Node) string {
	t.Helper()
	resp, err := http.Get("http://" + n.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// metric is the value of an unlabelled metric in a scrape, 0 when absent.
func metric(body, name string) float64 {
	m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// TestAuditUnderLoad: while other posts are liked without a pause, an audit still
// compares at a consistent point — each partition need only be seen caught up once, not
// all at the same instant — finding the drift and nothing else, skipping nothing.
func TestAuditUnderLoad(t *testing.T) {
	n, c := rig.StartNode(t, nil)
	ctx := context.Background()
	nc, err := nats.Connect(n.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if err := c.Publish(ctx, pipeline.Event{Type: "like", UID: 1, Post: 100}, pipeline.Event{Type: "like", UID: 2, Post: 300},
		pipeline.Event{Type: "incr", Family: "post", ID: 100, Field: "like", N: 1}); err != nil {
		t.Fatal(err)
	}
	rig.WaitCaughtUp(t, c)
	loadCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var batches atomic.Int64
	wg.Go(func() { // likes of posts 1000.. by ever new users, batch after batch
		for i := 0; loadCtx.Err() == nil; i++ {
			evs := make([]pipeline.Event, 50)
			for j := range evs {
				evs[j] = pipeline.Event{Type: "like", UID: pipeline.ID(10_000 + i*50 + j), Post: pipeline.ID(1000 + j)}
			}
			if err := c.PublishBatch(loadCtx, fmt.Sprint("load-", i), evs); err != nil && loadCtx.Err() == nil {
				t.Errorf("load: %v", err)
				return
			}
			batches.Add(1)
		}
	})
	start := batches.Load()
	r := auditReq(t, nc, `{"posts":[100,300]}`)
	during := batches.Load() - start
	stop()
	wg.Wait()
	want := []pipeline.Drift{{Family: "post", ID: 100, Field: "like", Counter: 2, Relations: 1}}
	if r.Error != "" || !slices.Equal(r.Drift, want) || len(r.Skipped) != 0 {
		t.Fatalf("audit under load (%d batches of likes during it) = %+v, want drift %+v and nothing skipped", during, r, want)
	}
	t.Logf("%d batches of 50 likes published during the audit", during)
}

// TestAuditFollowInFlight: a follow and an unfollow whose hops to the followed users'
// partition are stored but not applied there (the partition held back, as a backlog
// holds it) are counts in flight, not drift: a repairing audit skips both followed
// users and repairs nothing, and once the hops land each follower counter equals its
// list — a repair of the follow in flight would have left the counter at 0 against a
// list of 1, and the unfollow's at 1 against 0. A like handed to the held partition in
// an unsplit batch has changed neither its count nor its likers yet: its post is
// checked, not skipped.
func TestAuditFollowInFlight(t *testing.T) {
	const parts = 4 // startNode's
	target := uint64(1)
	q := pipeline.PartitionOf(pipeline.ID(target), parts)
	// from is the first id from from that is in partition q, or not.
	from := func(id uint64, inQ bool) uint64 {
		for (pipeline.PartitionOf(pipeline.ID(id), parts) == q) != inQ {
			id++
		}
		return id
	}
	target2, follower, follower2 := from(target+1, true), from(100, false), from(200, false)
	liker, post := from(300, true), from(1000, false)
	var gate atomic.Pointer[chan struct{}] // closed to let partition q go on
	n, c := rig.StartNode(t, func(cfg *node.Config) {
		cfg.HoldEvents = func(p int) {
			if g := gate.Load(); g != nil && p == q {
				<-*g
			}
		}
	})
	release := func() {
		if g := gate.Swap(nil); g != nil {
			close(*g)
		}
	}
	t.Cleanup(release) // before the node closes
	ctx := context.Background()
	nc, err := nats.Connect(n.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	followers := func(uid uint64) ([]uint64, uint64) {
		t.Helper()
		page, err := c.List(ctx, client.Followers, uid, 10, "")
		if err != nil {
			t.Fatal(err)
		}
		r, err := c.Get(ctx, "user", uid)
		if err != nil {
			t.Fatal(err)
		}
		return page.IDs, r.Counts[0][0]
	}
	settled := func(what string, uid uint64, list []uint64, counter uint64) {
		t.Helper()
		rig.Eventually(t, what, func() (bool, string) {
			l, n := followers(uid)
			return slices.Equal(l, list) && n == counter, fmt.Sprintf("followers of %d: list %v, counter %d", uid, l, n)
		})
	}
	if err := c.Publish(ctx, pipeline.Event{Type: "follow", UID: pipeline.ID(follower2), Target: pipeline.ID(target2), Tx: "f2"}); err != nil {
		t.Fatal(err)
	}
	settled("the first follow", target2, []uint64{follower2}, 1)

	ch := make(chan struct{})
	gate.Store(&ch)
	if err := c.Publish(ctx, pipeline.Event{Type: "follow", UID: pipeline.ID(follower), Target: pipeline.ID(target), Tx: "f1"},
		pipeline.Event{Type: "unfollow", UID: pipeline.ID(follower2), Target: pipeline.ID(target2), Tx: "u2"}); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := pipeline.Marshal(&pipeline.Batch{Events: []pipeline.Event{{Type: "like", UID: pipeline.ID(liker), Post: pipeline.ID(post)}}}, false)
	if _, err := js.Publish(ctx, c.Subjects().Event(pipeline.TypeBatch, pipeline.ID(follower)), data, jetstream.WithMsgID("l1")); err != nil {
		t.Fatal(err) // an unsplit batch: applied in follower's partition, which hands the like to q
	}
	// The counters moved in the followers' partitions; the lists wait in partition q.
	settled("the follow's counter", target, nil, 1)
	settled("the unfollow's counter", target2, []uint64{follower2}, 0)

	req := fmt.Sprintf(`{"posts":[%d],"users":[%d,%d,%d,%d],"repair":true}`, post, follower, target, follower2, target2)
	r := auditReq(t, nc, req)
	var skipped []uint64
	for _, s := range r.Skipped {
		if strings.Contains(s.Reason, "in flight") {
			skipped = append(skipped, uint64(s.ID))
		}
	}
	if r.Error != "" || len(r.Drift) != 0 || !slices.Equal(skipped, []uint64{target, target2}) || len(r.Skipped) != 2 || r.Checked != 6 {
		t.Errorf("audit while the hops to partition %d are in flight = %+v\nwant users %d and %d skipped in flight, the post's and the followers' 6 counters checked, no drift",
			q, r, target, target2)
	}

	release()
	rig.WaitCaughtUp(t, c)
	checkCounts(t, c, "user", []uint64{target, target2}, [][]uint64{{1, 0, 0}, {0, 0, 0}})
	checkCounts(t, c, "post", []uint64{post}, [][]uint64{{1, 0, 0, 0}})
	if l, _ := followers(target); !slices.Equal(l, []uint64{follower}) {
		t.Errorf("followers of %d = %v, want [%d]", target, l, follower)
	}
	if l, _ := followers(target2); len(l) != 0 {
		t.Errorf("followers of %d = %v, want none", target2, l)
	}
	if r := auditReq(t, nc, strings.Replace(req, `,"repair":true`, "", 1)); r.Error != "" || len(r.Drift) != 0 || len(r.Skipped) != 0 || r.Checked != 10 {
		t.Errorf("audit once the hops landed = %+v, want no drift, nothing skipped", r)
	}
}
