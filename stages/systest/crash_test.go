package systest

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/buildinfo"
	"github.com/tally-dev/tally/stages/node"
	"github.com/tally-dev/tally/stages/systest/rig"
)

// TestMain lets the test binary run as a Tally process for the crash test, and removes
// the tallyd the rig built for the process tests.
func TestMain(m *testing.M) {
	if dir := os.Getenv("TALLY_CRASH_CHILD"); dir != "" {
		os.Exit(runChild(dir))
	}
	if url := os.Getenv(echoChild); url != "" {
		os.Exit(runEchoChild(url))
	}
	code := m.Run()
	rig.RemoveTallyd()
	os.Exit(code)
}

func runChild(dir string) int {
	cfg := node.DefaultConfig()
	cfg.DataDir = dir
	cfg.Listen = os.Getenv("TALLY_CRASH_LISTEN")
	cfg.Partitions = 8
	cfg.FlushInterval = 20 * time.Millisecond
	// A hot tier of 16 KiB and a snapshot every 200 journaled ids: kills also land in
	// evictions, cold reads and snapshot writes.
	cfg.HotMaxMem, cfg.SnapshotMin = 16<<10, 200
	// Posts count their viewers (compare checks them): through kills, failovers and
	// hand-overs too.
	cfg.Families = pipeline.WithViewers(cfg.Families)
	// The failover test runs the child on a NATS cluster, backing its state up there.
	if url := os.Getenv("TALLY_CRASH_NATS"); url != "" {
		cfg.NATSURL, cfg.BackupEvery, cfg.LeaseTTL, cfg.Join = url, 300*time.Millisecond, failoverTTL, true
	}
	// The full-disk test runs it alone on a NATS server of its own (see TestDiskFull).
	if url := os.Getenv("TALLY_CRASH_ALONE_NATS"); url != "" {
		cfg.NATSURL = url
	}
	// The availability tests read what it owns, and stop it as tallyd stops (SIGTERM).
	cfg.Metrics = os.Getenv("TALLY_CRASH_METRICS")
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	// Debug: the test reads how each partition loaded (source=snapshot).
	if err := node.Run(ctx, cfg, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	return 0
}

// startChild starts a Tally process the test can kill, with its embedded NATS server,
// and a client of it that rides out its restarts; both end with the test.
func startChild(t *testing.T) (*child, *client.Client) {
	t.Helper()
	ch := &child{t: t, dir: t.TempDir(), listen: rig.FreeAddr(t), metrics: rig.FreeAddr(t)}
	ch.start()
	t.Cleanup(func() {
		ch.kill()
		if t.Failed() {
			t.Logf("children's stderr:\n%s", ch.stderr.String())
		}
	})
	nc, err := nats.Connect("nats://"+ch.listen, nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond),
		nats.RetryOnFailedConnect(true))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c, err := client.New(nc, client.WithPartitions(8), client.WithTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return ch, c
}

// child is a Tally process the test can kill.
type child struct {
	t       *testing.T
	dir     string
	listen  string
	metrics string // where it serves /metrics, if set
	cmd     *exec.Cmd
	stderr  *rig.LogBuffer // every start's stderr, in order
}

func (c *child) start() {
	c.t.Helper()
	c.cmd = exec.Command(os.Args[0], "-test.run=^$")
	c.cmd.Env = append(os.Environ(), "TALLY_CRASH_CHILD="+c.dir, "TALLY_CRASH_LISTEN="+c.listen)
	if c.metrics != "" {
		c.cmd.Env = append(c.cmd.Env, "TALLY_CRASH_METRICS="+c.metrics)
	}
	if c.stderr == nil {
		c.stderr = new(rig.LogBuffer)
	}
	c.cmd.Stderr = c.stderr
	if err := c.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
}

// awaitSnapshot waits until the running process has written a snapshot.
func (c *child) awaitSnapshot() {
	c.t.Helper()
	rig.Eventually(c.t, "a snapshot written", func() (bool, string) {
		m, err := rig.ScrapeMetrics(context.Background(), c.metrics)
		if err != nil {
			return false, err.Error()
		}
		return m["tally_snapshots_total"] > 0, fmt.Sprint(m["tally_snapshots_total"], " snapshots")
	})
}

func (c *child) kill() {
	c.t.Helper()
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	_ = c.cmd.Wait()
}

// TestCrashKill9 feeds a random event log to a real Tally process and SIGKILLs it at
// random moments — mid-batch, mid-commit, mid-checkpoint, mid-publish — restarting it
// each time, while the producer retries every unacknowledged batch with the same
// transaction id, as a real producer would. At the end every count and relation must
// equal the reference: nothing lost, nothing counted twice.
func TestCrashKill9(t *testing.T) {
	kills, total := 6, 40_000
	switch {
	case testing.Short():
		kills, total = 3, 10_000
	case buildinfo.Race: // as many kills, closer together
		total = 24_000
	}
	ch, c := startChild(t)
	g := &gen{r: rand.New(rand.NewPCG(21, 22)), users: 800, posts: 600}
	// Kills are placed among the chunks, each a few milliseconds after a publish, so
	// they land while the process is consuming, committing, checkpointing, publishing.
	chunks := total / 600
	killAt := map[int]bool{}
	for len(killAt) < kills {
		killAt[1+g.r.IntN(chunks-2)] = true
	}
	var killer sync.WaitGroup
	killed := 0
	ctx := context.Background()
	for chunk := 0; total > 0; chunk++ {
		evs := g.chunk(&total, 400, 400)
		if killAt[chunk] {
			killer.Wait()
			killed++
			if killed == kills {
				// The pipeline runs behind the producer, more so on a loaded machine: the
				// last kill waits for a snapshot, so the last start has one to load.
				ch.awaitSnapshot()
			}
			delay := time.Duration(g.r.IntN(40)) * time.Millisecond
			t.Logf("kill %d at chunk %d (+%v)", killed, chunk, delay)
			killer.Go(func() {
				time.Sleep(delay)
				ch.kill()
				ch.start()
			})
		}
		tx := "crash." + strconv.Itoa(chunk)
		publishRetrying(t, c, tx, evs)
		if g.r.IntN(5) == 0 { // and a retry of an already stored batch
			_ = c.PublishBatch(ctx, tx, evs)
		}
	}
	killer.Wait()
	if killed != kills {
		t.Fatalf("%d kills, want %d", killed, kills)
	}
	// Catching up on 40 000 events the pipeline fell behind on takes long under -race
	// beside other packages' tests.
	rig.WaitHealthy(t, c, 90*time.Second)
	compare(t, c, g)
	// Restarts loaded RAM from snapshots and journals, and no snapshot was ever unusable.
	logs := ch.stderr.String()
	if n := strings.Count(logs, "source=snapshot"); n == 0 || strings.Contains(logs, "snapshot not used") {
		t.Fatalf("%d partitions restored from a snapshot; rejected: %v", n, strings.Contains(logs, "snapshot not used"))
	}
}

// TestDeltasExactBeyondDupWindow re-sends delta batches under new message ids, as happens
// when a stage re-publishes its outbox after the duplicate window has passed, and out of
// order, as after a retried publish: each batch must be applied once.
func TestDeltasExactBeyondDupWindow(t *testing.T) {
	n, c := rig.StartNode(t, func(c *node.Config) { c.Partitions = 2 })
	nc, _ := nats.Connect(n.ClientURL())
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	const post = 77
	p := pipeline.PartitionOf(post, 2)
	send := func(seq uint64, msgID string) {
		b := pipeline.DeltaBatch{Source: 999, Seq: seq, Deltas: []pipeline.Delta{{ID: post, Field: 3, N: int64(seq) * 10}}}
		if _, err := js.Publish(ctx, c.Subjects().Delta("post", p), pipeline.AppendDeltaBatch(nil, &b), jetstream.WithMsgID(msgID)); err != nil {
			t.Fatal(err)
		}
	}
	send(1, "a")
	send(1, "a-again")
	send(3, "c")
	send(2, "b")
	send(3, "c-again")
	send(2, "b-again")
	send(1, "a-third")
	rig.Eventually(t, "views of the re-sent batches", func() (bool, string) {
		r, err := c.Get(ctx, "post", post)
		if err != nil {
			return false, err.Error()
		}
		return r.Counts[0][3] == 60 && n.CounterStats.Duplicates.Load() == 4, fmt.Sprint(r.Counts, n.CounterStats.Duplicates.Load())
	})
}
