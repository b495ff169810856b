package systest

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/stages/node"
	"github.com/tally-dev/tally/stages/systest/rig"
)

// TestNATSRestart runs a node against a NATS server that is shut down twice while a
// retrying producer feeds it a random event log (re-sending with the same transaction
// id until acknowledged, and sometimes re-sending what was acknowledged), and started
// again about a second later on the same port and store. Tally must ride it out: no
// partition stops, and at the end every count and relation equals the reference.
func TestNATSRestart(t *testing.T) {
	total, outages := 24_000, 2
	if testing.Short() {
		total = 8_000
	}
	ns := rig.StartNATS(t)

	logs := &rig.LogBuffer{}
	cfg := node.DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.NATSURL = ns.URL()
	cfg.Partitions = 4
	cfg.FlushInterval = 20 * time.Millisecond
	n, err := node.Start(context.Background(), cfg, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		if t.Failed() {
			t.Logf("node log:\n%s", logs.String())
		}
	})

	nc, err := nats.Connect(ns.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond), nats.RetryOnFailedConnect(true))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c, err := client.New(nc, client.WithPartitions(cfg.Partitions), client.WithTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	seed := uint64(envInt("TALLY_OUTAGE_SEED", 31))
	g := &gen{r: rand.New(rand.NewPCG(seed, 32)), users: 600, posts: 500}
	chunks := total / 500
	outageAt := map[int]bool{}
	for len(outageAt) < outages { // spread out, so each outage ends before the next
		outageAt[(len(outageAt)+1)*chunks/(outages+1)+g.r.IntN(chunks/(outages+2))] = true
	}
	var outage sync.WaitGroup
	ctx := context.Background()
	retries, done := 0, 0
	for chunk := 0; total > 0; chunk++ {
		evs := g.chunk(&total, 300, 400)
		if outageAt[chunk] {
			outage.Wait()
			done++
			delay := time.Duration(g.r.IntN(30)) * time.Millisecond
			t.Logf("NATS outage %d at chunk %d (+%v)", done, chunk, delay)
			outage.Go(func() {
				time.Sleep(delay)
				if h, err := c.Health(ctx); err == nil { // how far behind the node is as NATS goes
					t.Logf("outage %d: lagging %v", done, h.Lagging)
				}
				ns.Stop()
				time.Sleep(time.Second)
				ns.Start()
				// The next outage only after the node is back: two outages, not one long one.
				for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
					hctx, cancel := context.WithTimeout(ctx, time.Second)
					_, err := c.Health(hctx)
					cancel()
					if err == nil {
						break
					}
				}
			})
		}
		tx := "outage." + strconv.Itoa(chunk)
		for attempt := 0; ; attempt++ { // a producer's retry: same events, same tx
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			err := c.PublishBatch(pctx, tx, evs)
			cancel()
			if err == nil {
				break
			}
			retries++
			if attempt > 300 {
				t.Fatalf("chunk %d never stored: %v", chunk, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if g.r.IntN(5) == 0 { // and a retry of an already stored batch
			_ = c.PublishBatch(ctx, tx, evs)
		}
		select {
		case <-n.Failed():
			t.Fatalf("the node stopped a partition at chunk %d", chunk)
		default:
		}
	}
	outage.Wait()
	if done != outages {
		t.Fatalf("%d outages, want %d", done, outages)
	}
	if got := n.NATSDisconnects.Load(); got < int64(outages) {
		t.Errorf("tallyd counted %d lost connections in %d outages", got, outages)
	}
	t.Logf("%d producer retries", retries)
	rig.Eventually(t, "caught up after the outages", func() (bool, string) {
		select {
		case <-n.Failed():
			return false, "the node stopped a partition"
		default:
		}
		h, err := c.Health(ctx)
		if err != nil {
			return false, err.Error()
		}
		return h.OK, fmt.Sprint(h.Lagging)
	})
	compare(t, c, g)
	select {
	case <-n.Failed():
		t.Fatal("the node stopped a partition")
	default:
	}
	t.Logf("outbox publish retries: %d", n.EventStats.Retries.Load())
}
