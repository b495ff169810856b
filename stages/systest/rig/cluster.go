package rig

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/pipeline/natstest"
)

// StartTallyds starts n tallyd processes (StartTallyd) on the NATS servers at urls: the
// first alone until it answers healthy (it creates the streams), then the others, and
// waits until every process owns its share of the partitions and every partition has
// caught up.
func StartTallyds(tb testing.TB, bin, urls string, n int, extra ...string) ([]*TallydProc, *client.Client) {
	tb.Helper()
	ps := []*TallydProc{StartTallyd(tb, bin, urls, extra...)}
	nc, err := nats.Connect(urls, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	c, err := client.New(nc, client.WithPartitions(TallydPartitions))
	if err != nil {
		tb.Fatal(err)
	}
	WaitHealthy(tb, c, time.Minute)
	for range n - 1 {
		ps = append(ps, StartTallyd(tb, bin, urls, extra...))
	}
	natstest.Eventually(tb, 2*time.Minute, "partitions spread over the processes", func() (bool, string) {
		var owned []float64
		for _, p := range ps {
			m, err := p.Scrape(context.Background())
			if err != nil {
				return false, err.Error()
			}
			owned = append(owned, m["tally_owned_partitions"])
		}
		for _, o := range owned {
			if o < float64(TallydPartitions/n) { // 5 of 16 each for three
				return false, fmt.Sprint("owned ", owned)
			}
		}
		return true, ""
	})
	WaitHealthy(tb, c, time.Minute)
	return ps, c
}
