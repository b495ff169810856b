package systest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/buildinfo"
	"github.com/tally-dev/tally/pipeline/natstest"
	"github.com/tally-dev/tally/stages/node"
	"github.com/tally-dev/tally/stages/systest/rig"
)

// TestReadsThroughNATSServerLoss: three tallyd on a three-server NATS cluster, a reader
// on a server that stays, and the server leading the ownership bucket stopped for good,
// with leases long enough to outlive its election: no partition moves, and the reader
// loses no get. A round that read a holder as free while the bucket elected its leader
// dealt that partition afresh and moved it: its reads failed until the taker started.
// And a get sent as the server went waited about a second, and failed, given 1 s, in
// 4 runs of 18 (12-02): every counter partition asked the changes stream for its last
// change event on its own goroutine, which NATS left unanswered for the second of that
// request's timeout (TestQueriesAnsweredWhileLookingUpChanges); 0 of 10 since.
func TestReadsThroughNATSServerLoss(t *testing.T) {
	if buildinfo.Race {
		// Under -race in CI a partition moved once at the loss and 4 polls timed out
		// (open: see issue 24's note); without it, 0 failed polls in 5 of 5 runs.
		t.Skip("too slow under the race detector to tell a hand-over from a loss; run without -race (task avail)")
	}
	cl := natstest.StartCluster(t, 3)
	const partitions = 8
	join := func(c *node.Config) {
		c.NATSURL, c.Join, c.BackupEvery, c.Partitions = cl.URLs(), true, 300*time.Millisecond, partitions
		c.LeaseTTL = 10 * time.Second
	}
	var nodes []*node.Node
	for range 3 {
		n, _ := rig.StartNode(t, join)
		nodes = append(nodes, n)
	}
	// Settled: each owns its share (a partition moves to its target only once warm there),
	// and no hand-over is under way: a partition being handed over is owned by neither
	// (counted by share alone, a move begun 94 ms before the loss ended after it, and
	// failed the test).
	natstest.Eventually(t, 2*time.Minute, "each tallyd owns its share, none handing one over", func() (bool, string) {
		owned := 0
		for _, n := range nodes {
			k := len(n.Parts())
			if k < partitions/len(nodes) || k > (partitions+len(nodes)-1)/len(nodes) {
				return false, fmt.Sprintf("a tallyd owns %d partitions", k)
			}
			owned += k
		}
		return owned == partitions, fmt.Sprintf("%d of %d partitions owned", owned, partitions)
	})
	// The server to stop leads the ownership bucket; the reader is on another.
	lost, stays := 0, 0
	natstest.Eventually(t, 30*time.Second, "the ownership bucket has a leader", func() (bool, string) {
		js, err := jetstream.New(natstest.Connect(t, cl.Servers[0]))
		if err != nil {
			return false, err.Error()
		}
		st, err := js.Stream(context.Background(), "KV_"+pipeline.NewSubjects("tally").OwnersBucket())
		if err != nil || st.CachedInfo().Cluster == nil {
			return false, fmt.Sprint(err)
		}
		for i, srv := range cl.Servers {
			if srv.Name() == st.CachedInfo().Cluster.Leader {
				lost, stays = i, (i+1)%len(cl.Servers)
				return true, ""
			}
		}
		return false, "no leader"
	})
	nc, err := nats.Connect(cl.Servers[stays].ClientURL(), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c, err := client.New(nc, client.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// One post in every partition, each viewed once.
	var ids []uint64
	var evs []pipeline.Event
	for id, seen := pipeline.ID(1<<41), map[int]bool{}; len(seen) < partitions; id++ {
		if p := pipeline.PartitionOf(id, partitions); !seen[p] {
			seen[p] = true
			ids = append(ids, uint64(id))
			evs = append(evs, pipeline.Event{Type: "view", Post: id})
		}
	}
	publishRetrying(t, c, "loss.0", evs)
	natstest.Eventually(t, 30*time.Second, "every view counted", func() (bool, string) {
		got, err := c.Get(ctx, "post", ids...)
		if err != nil {
			return false, err.Error()
		}
		return len(got.Unavailable) == 0 && got.Counts[partitions-1][3] == 1, fmt.Sprint(got)
	})
	type poll struct {
		at  time.Duration
		err error
	}
	var polls []poll
	stopped := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for time.Since(stopped) < 8*time.Second {
			at := time.Since(stopped)
			got, err := c.Get(ctx, "post", ids...)
			if err == nil && len(got.Unavailable) > 0 {
				err = fmt.Errorf("%d ids unavailable", len(got.Unavailable))
			}
			polls = append(polls, poll{at, err})
			time.Sleep(50 * time.Millisecond)
		}
	}()
	owned := make([][]int, len(nodes))
	for i, n := range nodes {
		owned[i] = n.Parts()
	}
	t.Logf("stopping server %s, the ownership bucket's leader", cl.Servers[lost].Name())
	cl.Stop(lost)
	<-done
	var first, last time.Duration = -1, -1
	failed := 0
	for _, p := range polls {
		if p.err != nil {
			failed++
			if first < 0 {
				first = p.at
			}
			last = p.at
			t.Logf("%v: %v", p.at.Round(time.Millisecond), p.err)
		}
	}
	t.Logf("%d of %d polls failed, from %v to %v", failed, len(polls), first, last)
	for i, n := range nodes {
		if !slices.Equal(n.Parts(), owned[i]) {
			t.Errorf("tallyd %d owned partitions %v before the server was lost, %v after: a partition moved", i, owned[i], n.Parts())
		}
	}
	if failed > 0 {
		t.Errorf("%d polls failed; none may", failed)
	}
}
