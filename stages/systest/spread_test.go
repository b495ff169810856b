package systest

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tally-dev/tally/stages/node"
	"github.com/tally-dev/tally/stages/systest/rig"
)

// TestSpread moves partitions between live tallyd while events stream in: a second one
// joins and takes its share, a third joins, then the first leaves cleanly (handing its
// partitions over, event stages and counters) and the second is closed too, leaving
// everything to the third. Every hand-over goes through a backup in NATS; every count and
// relation must be exact at the end, and at every step each partition has one owner.
func TestSpread(t *testing.T) {
	const partitions = 6
	url, c := rig.NATSServer(t)
	start := func() *node.Node {
		return rig.StartJoiner(t, url, func(cfg *node.Config) {
			cfg.Metrics, cfg.Partitions, cfg.BackupEvery, cfg.LeaseTTL = "127.0.0.1:0", partitions, 200*time.Millisecond, time.Second
			cfg.PurgeEvery = 100 * time.Millisecond // deltas a backup covers are gone: a new owner needs the backup
		})
	}
	// spread waits until live own every partition once, evenly.
	spread := func(what string, live ...*node.Node) {
		t.Helper()
		rig.Eventually(t, what, func() (bool, string) {
			var all []int
			for _, n := range live {
				ps := n.Parts()
				if len(ps) < partitions/len(live) || len(ps) > (partitions+len(live)-1)/len(live) {
					return false, fmt.Sprint("uneven: ", ps)
				}
				all = append(all, ps...)
			}
			slices.Sort(all)
			return slices.Equal(all, []int{0, 1, 2, 3, 4, 5}), fmt.Sprint("owned: ", all)
		})
	}
	a := start()
	defer a.Close()
	if !a.Events() || len(a.Parts()) != partitions {
		t.Fatalf("the first tallyd owns every partition: stages %v, partitions %v", a.Events(), a.Parts())
	}

	g := &gen{r: rand.New(rand.NewPCG(7, 8)), users: 300, posts: 300}
	total := 12_000
	var b, d *node.Node
	for chunk := 0; total > 0; chunk++ {
		publishRetrying(t, c, "sp."+strconv.Itoa(chunk), g.chunk(&total, 200, 200))
		switch chunk {
		case 5:
			b = start()
			defer b.Close()
			spread("two tallyd share the partitions", a, b)
		case 15:
			d = start()
			defer d.Close()
			spread("three tallyd share the partitions", a, b, d)
		case 25:
			start := time.Now()
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			closed := time.Since(start)
			spread("the first one's partitions handed over", b, d)
			if !b.Events() || !d.Events() {
				t.Fatalf("event stages owned: %v %v, want both", b.Events(), d.Events())
			}
			t.Logf("clean stop of a third: closed in %v, everything owned again %v after the stop began (lease %v)",
				closed.Round(time.Millisecond), time.Since(start).Round(time.Millisecond), time.Second)
		case 35:
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			spread("the last one owns everything", d)
		}
	}
	rig.WaitCaughtUp(t, c)
	compare(t, c, g)
	t.Logf("taken over: b %d restored, %d warm; d %d restored, %d warm", b.PartsRestored.Load(), b.PartsWarm.Load(), d.PartsRestored.Load(), d.PartsWarm.Load())
	if d.PartsRestored.Load()+d.PartsWarm.Load() < partitions/3 {
		t.Fatalf("the last tallyd took %d partitions over from backups and %d from its standbys", d.PartsRestored.Load(), d.PartsWarm.Load())
	}
	// What operators see of it.
	resp, err := http.Get("http://" + d.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"tally_owned_partitions 6", "tally_owns_event_stages 1", fmt.Sprint("tally_partitions_taken_over_total ", d.PartsRestored.Load())} {
		if !strings.Contains(string(body), want+"\n") {
			t.Errorf("metrics lack %q", want)
		}
	}
	if r, err := c.Get(context.Background(), "post", 1, 2, 3, 4, 5, 6, 7, 8); err != nil || len(r.Unavailable) > 0 {
		t.Fatalf("get after the hand-overs: %v, unavailable %v", err, r)
	}
}
