package systest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
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
	"github.com/tally-dev/tally/pipeline/natstest"
	"github.com/tally-dev/tally/stages/hop"
	"github.com/tally-dev/tally/stages/hop/hoptest"
	"github.com/tally-dev/tally/stages/node"
	"github.com/tally-dev/tally/stages/reference"
	"github.com/tally-dev/tally/stages/systest/rig"
)

// A test binary started with TALLY_CHAOS_CHILD runs as the chaos test's tallyd and
// nothing else (TestMain belongs to the crash test, which this must not disturb).
func init() {
	if dir := os.Getenv("TALLY_CHAOS_CHILD"); dir != "" {
		os.Exit(runChaosChild(dir))
	}
}

// chaosDupWindow is the events stream's duplicate window in the chaos test: short, so
// that every internal re-send (after a crash, a NATS restart, a failed publish) comes
// after it and only Tally's own exactly-once channel can keep it from counting twice.
const chaosDupWindow = time.Second

// chaosFamilies are the chaos test's families: posts count their viewers, so that the
// sketches go through the same kills, NATS restarts and failed, reordered and lost hop
// publishes as the counters (views with a uid are applied in their post's partition,
// handed there when a batch brings them elsewhere).
func chaosFamilies() pipeline.Families { return pipeline.WithViewers(pipeline.DefaultFamilies()) }

func runChaosChild(dir string) int {
	cfg := node.DefaultConfig()
	cfg.DataDir = dir
	cfg.Families = chaosFamilies()
	cfg.NATSURL = os.Getenv("TALLY_CHAOS_NATS")
	cfg.Partitions = envInt("TALLY_CHAOS_PARTITIONS", 4)
	cfg.FlushInterval = 20 * time.Millisecond
	cfg.DupWindow = chaosDupWindow
	cfg.FanoutLimit = 6 // a few authors' posts are pulled, the rest pushed
	cfg.HotMaxMem, cfg.SnapshotMin = 16<<10, 200
	if os.Getenv("TALLY_CHAOS_JOIN") != "" {
		// Backups as often as the failover tests take them; a dead owner's lease runs out
		// a second after its last renewal, and its standbys take its partitions over.
		cfg.Join, cfg.BackupEvery, cfg.LeaseTTL = true, 300*time.Millisecond, time.Second
	}
	if spec := os.Getenv("TALLY_CHAOS_FAULTS"); spec != "" {
		f, err := hoptest.ParseFaults(spec)
		if err != nil {
			fmt.Fprintln(os.Stderr, "chaos child:", err)
			return 1
		}
		cfg.WrapPublisher = hoptest.Wrap(f)
		if path := os.Getenv("TALLY_CHAOS_DELTAS"); path != "" {
			out, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
			if err != nil {
				fmt.Fprintln(os.Stderr, "chaos child:", err)
				return 1
			}
			defer out.Close()
			wrap := cfg.WrapPublisher
			cfg.WrapPublisher = func(p hop.Publisher, salt uint64) hop.Publisher {
				return wrap(&deltaRecorder{Publisher: p, f: out}, salt)
			}
		}
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if os.Getenv("TALLY_CHAOS_DEBUG") != "" { // every child's lines at debug level, each saying whose
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("pid", os.Getpid())
	}
	if err := node.Run(context.Background(), cfg, log); err != nil {
		fmt.Fprintln(os.Stderr, "chaos child:", err)
		return 1
	}
	return 0
}

// chaosChild is the tallyd process of the chaos test, restarted after every kill with
// new publish faults. A process that exits by itself is restarted too, as a supervisor
// (systemd's Restart=on-failure) would, and recorded: failing to start while NATS is
// away is how tallyd is meant to behave; stopping once running is a finding.
type chaosChild struct {
	t        *testing.T
	dir, url string
	parts    int
	faults   string // with %d for the seed: seeds + the start's number
	seeds    int
	stderr   *rig.LogBuffer
	join     bool // one of several tallyd sharing the partitions, with warm standbys

	mu         sync.Mutex
	p          *chaosProc // nil while killed
	closed     bool
	starts     int
	startFails []string // the last line of each start that failed
	stops      []string // the last line of each process that stopped while running
}

type chaosProc struct {
	cmd    *exec.Cmd
	log    *rig.LogBuffer // this start's stderr
	exited chan struct{}
}

func (c *chaosChild) start() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.startLocked()
}

func (c *chaosChild) startLocked() {
	c.starts++
	p := &chaosProc{cmd: exec.Command(os.Args[0], "-test.run=^$"), log: &rig.LogBuffer{}, exited: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), "TALLY_CHAOS_CHILD="+c.dir, "TALLY_CHAOS_NATS="+c.url,
		"TALLY_CHAOS_PARTITIONS="+strconv.Itoa(c.parts), "TALLY_CHAOS_FAULTS="+fmt.Sprintf(c.faults, c.seeds+c.starts))
	if c.join {
		p.cmd.Env = append(p.cmd.Env, "TALLY_CHAOS_JOIN=1")
	}
	p.cmd.Stderr = io.MultiWriter(c.stderr, p.log)
	if err := p.cmd.Start(); err != nil {
		c.t.Error(err)
		return
	}
	c.p = p
	go c.watch(p)
}

// watch waits for p to exit and restarts it if nobody killed it.
func (c *chaosChild) watch(p *chaosProc) {
	_ = p.cmd.Wait()
	close(p.exited)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.p != p || c.closed {
		return // killed
	}
	c.p = nil
	logs := p.log.String()
	if strings.Contains(logs, "tally running") {
		c.stops = append(c.stops, lastLine(logs))
	} else {
		c.startFails = append(c.startFails, lastLine(logs))
	}
	time.AfterFunc(200*time.Millisecond, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.p == nil && !c.closed {
			c.startLocked()
		}
	})
}

// pause stops the running process (SIGSTOP) for d and lets it go on (SIGCONT), as a
// long GC pause, a frozen VM or a throttled cgroup would: past its lease, its partitions
// are taken over meanwhile, and what it held back — a publish in its client's buffer or
// delayed by the faulty publisher — goes out as it resumes, after the new owners'.
func (c *chaosChild) pause(d time.Duration) {
	c.mu.Lock()
	p := c.p
	c.mu.Unlock()
	if p == nil || p.cmd.Process.Signal(syscall.SIGSTOP) != nil {
		return
	}
	time.Sleep(d)
	_ = p.cmd.Process.Signal(syscall.SIGCONT) // an error: killed meanwhile, and gone
}

func (c *chaosChild) kill() {
	c.mu.Lock()
	p := c.p
	c.p = nil
	c.mu.Unlock()
	if p != nil {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.exited
	}
}

// quit asks the running process to print its goroutines and exit (SIGQUIT), waiting up
// to 5 s; it is not started again.
func (c *chaosChild) quit() {
	c.mu.Lock()
	p := c.p
	c.closed = true
	c.mu.Unlock()
	if p == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
	}
}

func (c *chaosChild) close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.kill()
}

// chaosSize is the workload of one cycle.
type chaosSize struct {
	partitions, batches, events int // per cycle: batches of up to events each
	backlog                     int // raw batches of 5 000 events piled up while tallyd is down, every 10th cycle
	users, posts                int
}

// TestChaos is the fault-injection test of exactly-once: a random workload of every
// event type — batches mixing partitions (relation events forwarded), raw batches under
// one key, single events, system notices, reads of every kind, follows, posts, likes in
// the same millisecond, relations made and undone through every road — published by a retrying producer that also re-sends on
// purpose, into a tallyd child process whose internal publishes fail, are delayed,
// reordered and lost silently (hoptest.FaultyPublisher), which is SIGKILLed at random moments and restarted,
// against a NATS server that is restarted too; the events stream's duplicate window is
// 1 s, so internal re-sends come after it. At the end every count, relation, unread
// value and a mirror built from the change events must equal a model fed the stored
// events in the stream's order. TALLY_CHAOS_CYCLES sets the cycles (task chaos: 100 at
// full size), TALLY_CHAOS_SEED the seed.
func TestChaos(t *testing.T) { runChaos(t, 1, chaosServer(t)) }

// TestChaosCluster is TestChaos with three tallyd sharing the partitions (--join), each
// keeping warm standbys of others' and backing its own up: the SIGKILLs land on one of
// them at a time, restarted after up to two seconds, so that partitions fail over to
// their standbys (a lease outlives its owner by a second), move back as the killed one
// rejoins, and are killed again while they move. TALLY_CHAOS_CLUSTER=1 runs it (task
// chaos-cluster); TALLY_CHAOS_CYCLES and TALLY_CHAOS_SEED as for TestChaos.
//
// One cycle in four also pauses one of them (SIGSTOP) for 1.2 to 2.5 s, past its
// lease, and lets it go on (chaosChild.pause); TALLY_CHAOS_PAUSES=0 leaves the pauses
// out (they draw from a source of their own: the kills and outages of a seed are the
// same either way).
//
// "nats-cluster": the same on a NATS cluster of three servers (every stream replicated
// three times), whose outages take one server at a time away, so that stream leaders
// move while Tally publishes and reads.
func TestChaosCluster(t *testing.T) {
	if os.Getenv("TALLY_CHAOS_CLUSTER") == "" {
		t.Skip("set TALLY_CHAOS_CLUSTER=1 (task chaos-cluster)")
	}
	t.Run("nats-server", func(t *testing.T) { runChaos(t, 3, chaosServer(t)) })
	t.Run("nats-cluster", func(t *testing.T) { runChaos(t, 3, chaosCluster(t)) })
}

// chaosNATS is where the chaos test's processes connect, and how it takes the NATS
// servers away: down stops one for a while, up starts it again.
type chaosNATS struct {
	url      string
	servers  int
	down, up func(i int)
}

func chaosServer(t *testing.T) chaosNATS {
	ns := rig.StartNATS(t)
	return chaosNATS{url: ns.URL(), servers: 1, down: func(int) { ns.Stop() }, up: func(int) { ns.Start() }}
}

func chaosCluster(t *testing.T) chaosNATS {
	cl := natstest.StartCluster(t, 3)
	return chaosNATS{url: cl.URLs(), servers: 3, down: cl.Stop, up: func(i int) { cl.Start(t, i) }}
}

// runChaos is the chaos test with procs tallyd processes on ns.
func runChaos(t *testing.T, procs int, ns chaosNATS) {
	cycles := envInt("TALLY_CHAOS_CYCLES", 10)
	size := chaosSize{partitions: 4, batches: 4, events: 300, backlog: 2, users: 240, posts: 300}
	if cycles > 20 {
		size = chaosSize{partitions: 8, batches: 6, events: 1500, backlog: 20, users: 1200, posts: 2000}
	}
	seed := uint64(envInt("TALLY_CHAOS_SEED", 13))
	ctx := context.Background()

	deltas := "" // the children's notes of the delta batches they send (deltaRecorder)
	if os.Getenv("TALLY_CHAOS_EACH") != "" {
		deltas = filepath.Join(t.TempDir(), "deltas")
		t.Setenv("TALLY_CHAOS_DELTAS", deltas)
	}
	// Lost publishes are found after 1 s (hoptest.DefaultLostAckTimeout) and sent again.
	faults := "fail=0.05,delay=0.05,reorder=0.05,lose=0.01,seed=%d"
	stderr := &rig.LogBuffer{} // every process's, in turn
	children := make([]*chaosChild, procs)
	for i := range children {
		children[i] = &chaosChild{t: t, dir: t.TempDir(), url: ns.url, parts: size.partitions, faults: faults, seeds: 1000 * i, stderr: stderr, join: procs > 1}
		children[i].start()
	}
	t.Cleanup(func() {
		if t.Failed() { // a process that hangs says where: Go prints every goroutine on SIGQUIT
			for _, ch := range children {
				ch.quit()
			}
		}
		for _, ch := range children {
			ch.close()
		}
		logs := stderr.String()
		if path := os.Getenv("TALLY_CHAOS_LOG"); path != "" { // a passing run's too: its warnings say what it went through
			if err := os.WriteFile(path, []byte(logs), 0o644); err != nil {
				t.Log(err)
			}
		}
		if t.Failed() {
			t.Logf("tallyd's stderr (last 200 lines of %d; all of it in $TALLY_CHAOS_LOG when set):\n%s", strings.Count(logs, "\n"), rig.Tail(logs, 200))
		}
	})
	nc, err := nats.Connect(ns.url, nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond), nats.RetryOnFailedConnect(true))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c, err := client.New(nc, client.WithPartitions(size.partitions), client.WithTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	pr := &chaosProducer{t: t, c: c, js: js, acked: map[string]int{}}
	pr.caughtUp("tallyd up")

	g := &chaosGen{r: rand.New(rand.NewPCG(seed, 14)), users: size.users, posts: size.posts}
	var each *chaosEach
	if os.Getenv("TALLY_CHAOS_EACH") != "" {
		each = &chaosEach{t: t, c: c, js: js, g: g, ref: reference.NewOf(chaosFamilies())}
	}
	fr := rand.New(rand.NewPCG(seed, 15)) // faults: their own source, so the workload does not depend on them
	kills, outages := 0, 0
	pz, pauses := rand.New(rand.NewPCG(seed, 16)), 0
	pausing := procs > 1 && os.Getenv("TALLY_CHAOS_PAUSES") != "0"
	start := time.Now()
	backlogs := 0
	for cycle := range cycles {
		if cycle%10 == 5 { // a backlog: tallyd down while raw batches pile up
			backlogs++
			for _, ch := range children {
				ch.kill()
			}
			for range size.backlog {
				evs := make([]pipeline.Event, pipeline.MaxBatch/2)
				for i := range evs {
					evs[i] = g.rawEvent()
				}
				pr.send(g.nextTx(), evs, true)
			}
			for _, ch := range children {
				ch.start()
			}
		}
		var faultsDone sync.WaitGroup
		if cycle > 0 && fr.IntN(3) != 0 { // SIGKILL at a random moment of publishing and applying
			kills++
			ch, down := children[0], time.Duration(0)
			if len(children) > 1 { // one of several, down long enough for a failover
				ch, down = children[fr.IntN(len(children))], time.Duration(fr.IntN(2000))*time.Millisecond
			}
			delay := time.Duration(fr.IntN(800)) * time.Millisecond
			faultsDone.Go(func() {
				time.Sleep(delay)
				ch.kill()
				time.Sleep(down)
				ch.start()
			})
		}
		if cycle > 0 && fr.IntN(4) == 0 { // a NATS server away for 0.3 to 1.3 s
			outages++
			server := 0
			if ns.servers > 1 {
				server = fr.IntN(ns.servers)
			}
			delay, down := time.Duration(fr.IntN(800))*time.Millisecond, time.Duration(300+fr.IntN(1000))*time.Millisecond
			faultsDone.Go(func() {
				time.Sleep(delay)
				ns.down(server)
				time.Sleep(down)
				ns.up(server)
			})
		}
		if pausing && cycle > 0 && pz.IntN(4) == 0 { // one paused past its lease
			pauses++
			ch := children[pz.IntN(len(children))]
			delay, d := time.Duration(pz.IntN(800))*time.Millisecond, time.Duration(1200+pz.IntN(1300))*time.Millisecond
			faultsDone.Go(func() {
				time.Sleep(delay)
				ch.pause(d)
			})
		}
		for range size.batches {
			pr.publish(g, size.events)
			// Paced, so that the kill and the outage land while publishing as well as
			// while applying.
			time.Sleep(time.Duration(fr.IntN(150)) * time.Millisecond)
		}
		faultsDone.Wait()
		// A reads phase: reads of some users once everything before has been applied.
		pr.caughtUp(fmt.Sprintf("cycle %d caught up", cycle))
		if reads := g.reads(); len(reads) > 0 {
			pr.send(g.nextTx(), reads, g.r.IntN(3) == 0)
		}
		pr.caughtUp(fmt.Sprintf("cycle %d reads applied", cycle))
		each.check(cycle)
	}
	ran := time.Since(start)
	var starts int
	var stops, startFails []string
	for _, ch := range children {
		ch.mu.Lock()
		starts += ch.starts
		stops = append(stops, ch.stops...)
		startFails = append(startFails, ch.startFails...)
		ch.mu.Unlock()
	}
	if pausing {
		t.Logf("chaos: %d pauses of a tallyd past its lease; %d change events fenced", pauses, strings.Count(stderr.String(), "change events fenced"))
	}
	faulty := strings.Count(stderr.String(), "on purpose (a test setting)")
	moves := strings.Count(stderr.String(), "handing a counter partition over")

	// The model: every event a producer stored, in the stream's order.
	var ref *reference.Model
	var st *chaosStored
	chaosRead(t, "the events stream", func() (err error) {
		ref, st, err = chaosStoredEvents(ctx, js, c.Subjects())
		return err
	})
	t.Logf("chaos: %d cycles in %v (seed %d, %d tallyd, %d NATS servers, %d partitions, dup window %v): %d kills of tallyd (%d starts), %d backlogs of %d×5000 raw events, %d NATS restarts; internal publishes with %s (N: the start's number) in the %d starts that ran the event stages; %d counter partitions handed over",
		cycles, ran.Round(time.Millisecond), seed, procs, ns.servers, size.partitions, chaosDupWindow, kills, starts, backlogs, size.backlog, outages, strings.Replace(faults, "%d", "N", 1), faulty, moves)
	t.Logf("chaos: the producer sent %d transactions (%d batches, %d raw batches, %d of single events), %d retries, %d re-sent on purpose; stored %d messages, %d of them twice (a retry after the window), %d valid events: %v, %d invalid",
		pr.txs, pr.batches, pr.raws, pr.singles, pr.retries, pr.resent, st.msgs, st.again, ref.Events(), ref.Applied, st.bad)
	r := &chaosReport{t: t}
	for _, line := range stops {
		r.fail("process", "tallyd stopped by itself: %s", line)
	}
	why := map[string]int{}
	for _, line := range startFails {
		why[line]++
	}
	r.done("process", starts, fmt.Sprintf("tallyd starts that did not stop by themselves (%d failed to start, as they may while NATS is away: %v)", len(startFails), why))
	for tx, n := range pr.acked {
		if st.perTx[tx] != n {
			r.fail("acked", "transaction %s: %d events acknowledged, %d stored", tx, n, st.perTx[tx])
		}
	}
	r.done("acked", len(pr.acked), "producer transactions acknowledged and stored whole")
	var dead int
	chaosRead(t, "the dead letters", func() (err error) {
		dead, err = chaosDeadLetters(ctx, js, c.Subjects())
		return err
	})
	if dead != st.bad {
		r.fail("deadletters", "%d invalid events dead-lettered, %d stored", dead, st.bad)
	}
	r.done("deadletters", st.bad, "invalid events each dead-lettered (by stream position and index)")
	if deltas != "" {
		n, two, err := chaosDeltaNumbers(deltas)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range two {
			r.fail("deltas.numbers", "delta batch %s", line)
		}
		r.done("deltas.numbers", n, "delta batch numbers sent, each with one content (TALLY_CHAOS_EACH)")
	}
	if each != nil {
		for _, name := range each.corrupt {
			r.fail("backups", "state backup %s refused by its digest", name)
		}
		r.done("backups", each.backups, "state backups read back whole after the cycles (TALLY_CHAOS_EACH)")
	}
	// Queries of the whole id space may take longer than a producer's timeout.
	cq, err := client.New(nc, client.WithPartitions(size.partitions), client.WithTimeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	compared := time.Now()
	chaosCompare(t, cq, js, ref, g, r)
	t.Logf("chaos: compared in %v", time.Since(compared).Round(time.Millisecond))
	r.summary()
}

// chaosRead reads again until read succeeds, for up to a minute: on a NATS cluster, a
// server started again answers JetStream's API only once it has caught up, and the
// client may be connected to it ("no responders").
func chaosRead(t *testing.T, what string, read func() error) {
	t.Helper()
	natstest.Eventually(t, time.Minute, what+" read", func() (bool, string) {
		if err := read(); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}

// chaosProducer publishes like a careful client: every transaction is sent until it is
// acknowledged, with the same transaction id, and some are sent again on purpose.
type chaosProducer struct {
	t                           *testing.T
	c                           *client.Client
	js                          jetstream.JetStream
	acked                       map[string]int // tx → events acknowledged
	txs, batches, raws, singles int
	retries, resent             int
}

func (g *chaosGen) nextTx() string {
	g.tx++
	return "chaos." + strconv.Itoa(g.tx)
}

// publish sends one random transaction: an ordinary batch (split by partition by the
// client), a raw batch under one key, or single events.
func (p *chaosProducer) publish(g *chaosGen, events int) {
	n := 1 + g.r.IntN(events)
	tx := g.nextTx()
	switch mode := g.r.IntN(10); {
	case mode < 2:
		evs := make([]pipeline.Event, n)
		for i := range evs {
			evs[i] = g.rawEvent()
		}
		p.send(tx, evs, true)
	case mode < 3:
		evs := make([]pipeline.Event, min(n, 100))
		for i := range evs {
			evs[i] = g.event()
			evs[i].Tx = tx + ".s" + strconv.Itoa(i)
		}
		p.singles++
		p.retry(tx, len(evs), func(ctx context.Context) error { return p.c.Publish(ctx, evs...) })
		if g.r.IntN(4) == 0 {
			p.resent++
			_ = p.c.Publish(context.Background(), evs[:len(evs)/2]...)
		}
	default:
		evs := make([]pipeline.Event, n)
		for i := range evs {
			evs[i] = g.event()
		}
		p.send(tx, evs, false)
		if g.r.IntN(4) == 0 {
			p.resent++
			_ = p.c.PublishBatch(context.Background(), tx, evs)
		}
	}
}

// send publishes evs as one transaction: split by partition, or raw under the first
// event's key (relation events of other partitions are then forwarded by Tally).
func (p *chaosProducer) send(tx string, evs []pipeline.Event, raw bool) {
	if !raw {
		p.batches++
		p.retry(tx, len(evs), func(ctx context.Context) error { return p.c.PublishBatch(ctx, tx, evs) })
		return
	}
	p.raws++
	data, err := pipeline.Marshal(&pipeline.Batch{Events: evs}, false)
	if err != nil {
		p.t.Fatal(err)
	}
	subj := p.c.Subjects().Event(pipeline.TypeBatch, evs[0].Key())
	p.retry(tx, len(evs), func(ctx context.Context) error {
		_, err := p.js.Publish(ctx, subj, data, jetstream.WithMsgID(tx))
		return err
	})
}

func (p *chaosProducer) retry(tx string, n int, publish func(context.Context) error) {
	p.t.Helper()
	p.txs++
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		err := publish(ctx)
		cancel()
		if err == nil {
			p.acked[tx] = n
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("transaction %s never stored: %v", tx, err)
		}
		p.retries++
		time.Sleep(50 * time.Millisecond)
	}
}

// caughtUp waits until every partition has applied everything (tallyd may be starting
// again, NATS may be away: up to two minutes).
func (p *chaosProducer) caughtUp(what string) {
	p.t.Helper()
	chaosHealthy(p.t, p.c, what, 2*time.Minute)
}
