package node_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/pipeline/natstest"
	"github.com/tally-dev/tally/stages/node"
)

// failoverTTL is the ownership lease of the failover test: a dead owner's partitions are
// free this long after its last renewal.
const failoverTTL = 2 * time.Second

// TestFailover runs the owner of every partition as a real process on a three-server
// NATS cluster, backing its state up to the NATS object store, and two standby tallyd
// (with empty disks of their own) waiting for the ownership lease. Mid-stream the owner is
// SIGKILLed; one standby takes the lease once it expires, restores the last backup from
// NATS and replays the streams from the positions in it. Every count and relation must
// be exact at the end, and the other standby still waiting; the time from the kill to the
// first answered query is reported.
func TestFailover(t *testing.T) {
	total := 16_000
	if testing.Short() {
		total = 6_000
	}
	cl := natstest.StartCluster(t, 3)
	owner := &child{t: t, dir: t.TempDir()}
	owner.start()
	owner.cmd.Env = nil // start() already ran; restart with the cluster below
	owner.kill()
	owner.cmd = exec.Command(os.Args[0], "-test.run=^$")
	owner.cmd.Env = append(os.Environ(), "TALLY_CRASH_CHILD="+owner.dir, "TALLY_CRASH_NATS="+cl.URLs())
	owner.cmd.Stderr = owner.stderr
	if err := owner.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		owner.kill()
		if t.Failed() {
			t.Logf("owner's stderr:\n%s", owner.stderr.String())
		}
	})
	nc, err := nats.Connect(cl.URLs(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx := context.Background()
	var c *client.Client
	natstest.Eventually(t, time.Minute, "the owner up", func() (bool, string) {
		if c == nil {
			if c, err = client.New(nc, client.WithTimeout(time.Second)); err != nil {
				return false, err.Error()
			}
		}
		h, err := c.Health(ctx)
		return err == nil && h.OK, fmt.Sprint(h, err)
	})

	up := time.Now()
	// Two standbys with empty disks of their own: exactly one must take over.
	standby := make(chan *node.Node, 2)
	standbyCtx, stopStandbys := context.WithCancel(ctx)
	var waiting sync.WaitGroup
	for range 2 {
		cfg := node.DefaultConfig()
		cfg.DataDir, cfg.NATSURL, cfg.Partitions, cfg.FlushInterval = t.TempDir(), cl.URLs(), 8, 20*time.Millisecond
		cfg.Standby, cfg.BackupEvery, cfg.LeaseTTL = true, 300*time.Millisecond, failoverTTL
		waiting.Go(func() {
			n, err := node.Start(standbyCtx, cfg, testLogger())
			if err == nil {
				standby <- n
			} else if standbyCtx.Err() == nil {
				t.Error(err)
			}
		})
	}
	defer func() { stopStandbys(); waiting.Wait() }()

	g := &gen{r: rand.New(rand.NewPCG(41, 42)), users: 500, posts: 400}
	ref := newModel()
	killAt, killed, backedUp := total/2, time.Time{}, false
	js, _ := jetstream.New(nc)
	obs, err := js.ObjectStore(ctx, "TALLY_STATE")
	if err != nil {
		t.Fatal(err)
	}
	for chunk := 0; total > 0; chunk++ {
		evs := g.chunk(ref, &total, 300, 300)
		if killed.IsZero() && total <= killAt {
			if !backedUp {
				// The owner has stored a backup; a few more chunks go after it, then the kill.
				natstest.Eventually(t, time.Minute, "a state backup in NATS", func() (bool, string) {
					_, err := obs.GetInfo(ctx, "state")
					return err == nil, fmt.Sprint(err)
				})
				backedUp, killAt = true, total-2_000
			} else {
				time.Sleep(time.Duration(g.r.IntN(30)) * time.Millisecond)
				owner.kill()
				killed = time.Now()
				t.Logf("owner killed at chunk %d, %v after it was up", chunk, time.Since(up).Round(time.Millisecond))
			}
		}
		publishRetrying(t, c, "fo."+strconv.Itoa(chunk), evs)
		if g.r.IntN(5) == 0 {
			_ = c.PublishBatch(ctx, "fo."+strconv.Itoa(chunk), evs)
		}
	}
	probe := []uint64{1, 2, 3, 4, 5, 6, 7, 8}
	natstest.Eventually(t, time.Minute, "a query answered after the kill", func() (bool, string) {
		_, err := c.Get(ctx, "user", probe...)
		return err == nil, fmt.Sprint(err)
	})
	t.Logf("failover: first query answered %v after the kill (lease TTL %v)", time.Since(killed).Round(time.Millisecond), failoverTTL)
	n := <-standby
	defer n.Close()
	if n.Takeover() != "backup" {
		t.Fatalf("the standby took over from %q, want from the owner's backup", n.Takeover())
	}
	waitCaughtUp(t, c)
	compare(t, c, ref, g)
	select { // the lease is renewed: the other standby is still waiting
	case other := <-standby:
		other.Close()
		t.Fatal("both standbys took over")
	default:
	}
}
