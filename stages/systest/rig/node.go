package rig

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/pipeline/natstest"
	"github.com/tally-dev/tally/stages/node"
)

// StartNode runs a node with embedded NATS on a free port and data in t.TempDir().
func StartNode(t testing.TB, mod func(*node.Config)) (*node.Node, *client.Client) {
	t.Helper()
	cfg := node.DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.Listen = "127.0.0.1:-1"
	cfg.Partitions = 4
	cfg.FlushInterval = 20 * time.Millisecond
	if mod != nil {
		mod(&cfg)
	}
	n, err := node.Start(context.Background(), cfg, Logger().With("node", filepath.Base(cfg.DataDir)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	nc, err := nats.Connect(n.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return n, c
}

// StartJoiner starts a tallyd in this process that joins the others on the NATS server
// at url, backing its state up there; mod changes its configuration. It is closed at
// the end of the test unless the test closes it first.
func StartJoiner(t testing.TB, url string, mod func(*node.Config)) *node.Node {
	t.Helper()
	cfg := node.DefaultConfig()
	cfg.DataDir, cfg.NATSURL, cfg.FlushInterval, cfg.Join = t.TempDir(), url, 20*time.Millisecond, true
	mod(&cfg)
	n, err := node.Start(context.Background(), cfg, Logger().With("node", filepath.Base(cfg.DataDir)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// NATSServer starts a NATS server for tallyd to join and returns its URL and a client of it.
func NATSServer(t testing.TB) (string, *client.Client) {
	t.Helper()
	s := natstest.Start(t)
	c, err := client.New(natstest.Connect(t, s), client.WithTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return s.ClientURL(), c
}

// Logger is the nodes' logger: silent, unless TALLY_TEST_LOG is set (to warn: warnings
// and errors only, which disturb the timing of a race under load less; debug: all).
func Logger() *slog.Logger {
	if v := os.Getenv("TALLY_TEST_LOG"); v != "" {
		lvl := slog.LevelInfo
		switch v {
		case "warn":
			lvl = slog.LevelWarn
		case "debug":
			lvl = slog.LevelDebug
		}
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	}
	return slog.New(slog.DiscardHandler)
}

// Eventually polls cond until it holds or 30s pass.
func Eventually(t testing.TB, what string, cond func() (bool, string)) {
	t.Helper()
	natstest.Eventually(t, 30*time.Second, what, cond)
}

// WaitCaughtUp polls tally.health until every partition has caught up, for 30 s.
func WaitCaughtUp(t testing.TB, c *client.Client) {
	t.Helper()
	WaitHealthy(t, c, 30*time.Second)
}

// WaitHealthy polls tally.health until every partition has caught up, for timeout.
func WaitHealthy(t testing.TB, c *client.Client, timeout time.Duration) {
	t.Helper()
	natstest.Eventually(t, timeout, "every partition caught up", func() (bool, string) {
		h, err := c.Health(context.Background())
		if err != nil {
			return false, err.Error()
		}
		return h.OK, fmt.Sprint(h.Lagging)
	})
}

// RetryUnavailable calls ask until it answers something else than unavailable, as a
// client must: a partition may be handed over at any time (a lease lost while NATS elects
// a leader, on a machine slowed by the race detector), and answers unavailable until its
// new owner has it.
func RetryUnavailable(t testing.TB, what string, ask func() error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := ask()
		if err == nil {
			return
		}
		if !errors.Is(err, client.ErrUnavailable) || time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
