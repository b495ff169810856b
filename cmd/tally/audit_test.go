package main

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/stages/node"
)

// TestAuditCLI: tally audit exits 0 on a clean node, 1 when a counter drifted (printing
// it), repairs it with --repair, and exits 2 on a bad command line.
func TestAuditCLI(t *testing.T) {
	cfg := node.DefaultConfig()
	cfg.DataDir, cfg.Listen, cfg.Partitions, cfg.FlushInterval = t.TempDir(), "127.0.0.1:-1", 4, 20*time.Millisecond
	n, err := node.Start(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	nc, err := nats.Connect(n.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	publish := func(evs ...pipeline.Event) {
		t.Helper()
		if err := c.Publish(ctx, evs...); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "caught up", func() (bool, string) {
			h, err := c.Health(ctx)
			if err != nil {
				return false, err.Error()
			}
			return h.OK, ""
		})
	}
	publish(pipeline.Event{Type: "like", UID: 1, Post: 100}, pipeline.Event{Type: "like", UID: 2, Post: 100},
		pipeline.Event{Type: "follow", UID: 1, Target: 2})
	s := []string{"--server", n.ClientURL()}
	audit := func(args ...string) (int, string, string) {
		t.Helper()
		return tally(t, "", append(append([]string{"audit"}, args...), s...)...)
	}

	if code, out, errOut := audit("post", "100", "101", "user", "1", "2"); code != 0 || !strings.Contains(out, "audited 2 posts and 2 users: 8 counters checked, 0 drifted, 0 ids skipped") {
		t.Fatalf("clean audit: exit %d\n%s%s", code, out, errOut)
	}
	publish(pipeline.Event{Type: "incr", Family: "post", ID: 100, Field: "like", N: 3})
	code, out, errOut := audit("post", "100")
	if code != 1 || !strings.Contains(out, "post    100  like   5        2          -") || !strings.Contains(errOut, "1 counters drifted from their relations, 0 repaired") {
		t.Fatalf("audit of a drift: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = audit("--repair", "post", "100")
	if tx := pipeline.RepairMsgID("post", 100, "like", 5, 2); code != 1 || !strings.Contains(out, tx) || !strings.Contains(errOut, "1 repaired") {
		t.Fatalf("audit --repair: exit %d, want 1 and the repair %s\n%s%s", code, tx, out, errOut)
	}
	if code, out, errOut := audit("post", "100", "--sample", "10", "--json"); code != 0 || !strings.Contains(out, `"checked":`) {
		t.Fatalf("audit after the repair: exit %d\n%s%s", code, out, errOut)
	}
	for _, args := range [][]string{{}, {"100"}, {"post", "x"}, {"post"}} {
		if code, out, errOut := audit(args...); code != 2 {
			t.Errorf("audit %q: exit %d, want 2\n%s%s", args, code, out, errOut)
		}
	}
	if code, _, errOut := audit("--sample", "5000"); code != 1 || !strings.Contains(errOut, "sample 5000 out of range") {
		t.Errorf("audit --sample 5000: exit %d %s", code, errOut)
	}
}
