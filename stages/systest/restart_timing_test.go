package systest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/natstest"
	"github.com/tally-dev/tally/stages/node"
	"github.com/tally-dev/tally/stages/systest/rig"
	"github.com/tally-dev/tally/store/checkpoint"
	"github.com/tally-dev/tally/store/cold"
)

// BenchmarkRestart measures a restart with 10 M post counters checkpointed and a tail of
// 1 M view events published while the process was down: the time from Start to serving
// queries from every partition, and to having applied the whole tail. RAM comes from the
// snapshots the previous clean stop wrote; the start before that, without snapshots,
// is reported too.
// TALLY_RESTART_IDS and TALLY_RESTART_TAIL change the sizes.
// Run: go test ./stages/systest -run XXX -bench Restart -benchtime 1x -timeout 30m
func BenchmarkRestart(b *testing.B) {
	ids, tail := envInt("TALLY_RESTART_IDS", 10_000_000), envInt("TALLY_RESTART_TAIL", 1_000_000)
	s := natstest.Start(b)
	cfg := node.DefaultConfig()
	cfg.DataDir, cfg.NATSURL, cfg.Partitions = b.TempDir(), s.ClientURL(), 16
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	n, err := node.Start(context.Background(), cfg, log)
	if err != nil {
		b.Fatal(err)
	}
	if err := n.Close(); err != nil {
		b.Fatal(err)
	}
	writeCheckpoints(b, cfg, ids)
	// The first start has no snapshot and reads every stored counter; its clean stop
	// writes the snapshots the measured restart loads.
	first := time.Now()
	if n, err = node.Start(context.Background(), cfg, log); err != nil {
		b.Fatal(err)
	}
	nc, _ := nats.Connect(s.ClientURL())
	defer nc.Close()
	c, _ := client.New(nc)
	rig.WaitCaughtUp(b, c)
	fromBadger := time.Since(first)
	if err := n.Close(); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	const base = uint64(1_700_000_000_000) << 22
	evs := make([]pipeline.Event, 0, 16_000)
	for i := 0; i < tail; i++ {
		evs = append(evs, pipeline.Event{Type: "view", Post: pipeline.ID(base + uint64(i%ids)), N: 1})
		if len(evs) == cap(evs) || i == tail-1 {
			if err := c.PublishBatch(ctx, "tail."+strconv.Itoa(i), evs); err != nil {
				b.Fatal(err)
			}
			evs = evs[:0]
		}
	}
	b.ResetTimer()
	start := time.Now()
	n, err = node.Start(ctx, cfg, log)
	if err != nil {
		b.Fatal(err)
	}
	defer n.Close()
	probe := make([]uint64, 0, 64)
	for i := 0; len(probe) < 64; i++ { // ids in every partition
		probe = append(probe, base+uint64(i*7919%ids))
	}
	natstest.Eventually(b, 10*time.Minute, "serving", func() (bool, string) {
		_, err := c.Get(ctx, "post", probe...)
		return err == nil, fmt.Sprint(err)
	})
	serving := time.Since(start)
	rig.WaitCaughtUp(b, c)
	caughtUp := time.Since(start)
	b.StopTimer()
	r, err := c.Get(ctx, "post", base, base+uint64(ids-1))
	if err != nil || r.Counts[0][3] != 1+uint64(tail/ids)+boolInt(tail%ids > 0) {
		b.Fatalf("after restart: %v %v", r.Counts, err)
	}
	b.ReportMetric(serving.Seconds(), "s-to-serving")
	b.ReportMetric(caughtUp.Seconds(), "s-to-caught-up")
	b.ReportMetric(float64(ids), "hot-ids")
	b.ReportMetric(fromBadger.Seconds(), "s-to-start-without-snapshot")
	if got := n.CounterStats.Restored.Load(); got != int64(len(cfg.Families)*cfg.Partitions) {
		b.Fatalf("%d partitions restored from snapshots", got)
	}
}

func boolInt(v bool) uint64 {
	if v {
		return 1
	}
	return 0
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// writeCheckpoints stores ids post counters (view = 1) straight into the checkpoints of
// their partitions, as a long-running process would have left them.
func writeCheckpoints(b *testing.B, cfg node.Config, ids int) {
	b.Helper()
	db, err := cold.Open(cold.Options{Dir: cfg.DataDir + "/state"})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	const base = uint64(1_700_000_000_000) << 22
	parts := make([][]checkpoint.Entry, cfg.Partitions)
	counts := []uint64{0, 0, 0, 1}
	flush := func(p int) {
		if err := checkpoint.SaveCounters(db, "post", p, parts[p], &checkpoint.Checkpoint{}, checkpoint.Journal{}); err != nil {
			b.Fatal(err)
		}
		parts[p] = parts[p][:0]
	}
	for i := range ids {
		id := base + uint64(i)
		p := pipeline.PartitionOf(pipeline.ID(id), cfg.Partitions)
		parts[p] = append(parts[p], checkpoint.Entry{ID: id, Counts: counts})
		if len(parts[p]) == 10_000 {
			flush(p)
		}
	}
	for p := range parts {
		flush(p)
	}
}
