package systest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/buildinfo"
	"github.com/tally-dev/tally/pipeline/natstest"
	"github.com/tally-dev/tally/stages/systest/rig"
)

// These tests run tallyd processes (the test binary as a child, see runChild: 8
// partitions, backups every 300 ms, lease 2 s, warm standbys) on one NATS server while
// events stream in and every id of 1..64 — every partition — is asked for every 50 ms,
// and move partitions between them: a process joining, one killed and started again on
// its data directory, a rolling restart. A partition moves as a standby takeover, a stop
// and a start: no id may answer unavailable in polls 500 ms or more apart with only
// unavailable answers between them, and every count must be exact at the end.

// availUnavailable is the span of polls, all unavailable, that fails the tests.
const availUnavailable = 500 * time.Millisecond

// availProc is one tallyd of these tests: a child process with its own data directory,
// started again on it after a stop.
type availProc struct {
	t       *testing.T
	url     string
	dir     string
	metrics string
	cmd     *exec.Cmd
	done    chan struct{}
	stderr  *rig.LogBuffer
}

func startAvail(t *testing.T, url string) *availProc {
	t.Helper()
	p := &availProc{t: t, url: url, dir: t.TempDir(), metrics: rig.FreeAddr(t), stderr: new(rig.LogBuffer)}
	p.start()
	t.Cleanup(func() {
		p.signal(syscall.SIGKILL)
		if dir := os.Getenv("TALLY_AVAIL_LOGS"); dir != "" { // each process's whole log
			_ = os.WriteFile(filepath.Join(dir, filepath.Base(p.dir)+".log"), []byte(p.stderr.String()), 0o644)
		}
		if t.Failed() {
			t.Logf("tallyd %s stderr (last 20 lines):\n%s", p.dir, rig.Tail(p.stderr.String(), 20))
		}
	})
	return p
}

func (p *availProc) start() {
	p.t.Helper()
	p.cmd = exec.Command(os.Args[0], "-test.run=^$")
	p.cmd.Env = append(os.Environ(), "TALLY_CRASH_CHILD="+p.dir, "TALLY_CRASH_NATS="+p.url, "TALLY_CRASH_METRICS="+p.metrics)
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	done := make(chan struct{})
	p.done = done
	go func() {
		_ = p.cmd.Wait()
		close(done)
	}()
}

// signal sends sig and waits until the process is gone.
func (p *availProc) signal(sig syscall.Signal) {
	_ = p.cmd.Process.Signal(sig)
	<-p.done
}

// gauge reads one of the process's metrics (-1 when it cannot be read yet).
func (p *availProc) gauge(name string) float64 {
	m, err := rig.ScrapeMetrics(context.Background(), p.metrics)
	if err != nil {
		return -1
	}
	return m[name]
}

// sum is a metric summed over procs (-1 when one cannot be read).
func sum(procs []*availProc, name string) float64 {
	var s float64
	for _, p := range procs {
		v := p.gauge(name)
		if v < 0 {
			return -1
		}
		s += v
	}
	return s
}

// waitSpread waits until procs own every partition, each its share, and each partition
// has a warm standby (one caught up with its owner).
func waitSpread(t *testing.T, procs []*availProc, partitions int) {
	t.Helper()
	natstest.Eventually(t, 2*time.Minute, "the partitions spread, each with a warm standby", func() (bool, string) {
		var owned []float64
		total := 0.0
		for _, p := range procs {
			o := p.gauge("tally_owned_partitions")
			if o < float64(partitions/len(procs)) {
				return false, fmt.Sprint("owned ", owned, " then ", o)
			}
			owned, total = append(owned, o), total+o
		}
		warm := sum(procs, "tally_standby_partitions")
		return total == float64(partitions) && warm == float64(partitions), fmt.Sprint("owned ", owned, ", warm standbys ", warm)
	})
}

// availPoller asks about ids every 50 ms and counts the polls that found some of them
// unavailable, and the ids unavailable in every poll over availUnavailable or more.
type availPoller struct {
	// ask is one poll: the ids it found unavailable (nil and an error: every id), the
	// ids answered stale, and what failed.
	ask  func() (down []uint64, stale []pipeline.Stale, err error)
	ids  []uint64
	stop chan struct{}
	done chan struct{}

	polls, failed, errs int
	listed              int                  // polls whose reply listed some id unavailable (not an error)
	stale               int                  // polls whose reply counted some id from a standby
	behindMs            int64                // the most a standby said it was behind
	slowest             time.Duration        // the longest poll
	since               map[uint64]time.Time // unavailable in every poll since
	long                map[uint64]int       // polls of id that ended such a span
	worst               int                  // the most polls in a row some id was unavailable
	row                 map[uint64]int
	seen                []string // the first failed polls, for the log
}

// startPoller polls the user counts of ids, with GetWith's opts.
func startPoller(c *client.Client, ids []uint64, opts ...client.GetOption) *availPoller {
	return newPoller(ids, func() ([]uint64, []pipeline.Stale, error) {
		r, err := c.GetWith(context.Background(), "user", ids, opts...)
		if err != nil {
			return nil, nil, err
		}
		down := make([]uint64, len(r.Unavailable))
		for i, id := range r.Unavailable {
			down[i] = uint64(id)
		}
		return down, r.Stale, nil
	})
}

// startLikedPoller polls whether each of uids liked posts: a relation query of each
// uid's partition, which only its owner answers.
func startLikedPoller(c *client.Client, uids, posts []uint64) *availPoller {
	return newPoller(uids, func() ([]uint64, []pipeline.Stale, error) {
		var down []uint64
		var errs []error
		for _, uid := range uids {
			if _, err := c.Liked(context.Background(), uid, posts...); err != nil {
				down, errs = append(down, uid), append(errs, err)
			}
		}
		return down, nil, errors.Join(errs...)
	})
}

func newPoller(ids []uint64, ask func() ([]uint64, []pipeline.Stale, error)) *availPoller {
	a := &availPoller{ask: ask, ids: ids, stop: make(chan struct{}), done: make(chan struct{}),
		since: map[uint64]time.Time{}, long: map[uint64]int{}, row: map[uint64]int{}}
	go a.run()
	return a
}

func (a *availPoller) run() {
	defer close(a.done)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-a.stop:
			return
		case <-tick.C:
		}
		at := time.Now()
		unavailable, stale, err := a.ask()
		a.slowest = max(a.slowest, time.Since(at))
		down := map[uint64]bool{}
		if err != nil {
			a.errs++
			if unavailable == nil {
				unavailable = a.ids
			}
		} else if len(unavailable) > 0 {
			a.listed++
		}
		for _, id := range unavailable {
			down[id] = true
		}
		if len(stale) > 0 {
			a.stale++
		}
		for _, st := range stale {
			a.behindMs = max(a.behindMs, st.BehindMs)
		}
		a.polls++
		if len(down) > 0 {
			a.failed++
			if len(a.seen) < 10 {
				a.seen = append(a.seen, fmt.Sprintf("%s: %d ids, %v", at.Format("15:04:05.000"), len(down), err))
			}
		}
		for _, id := range a.ids {
			if !down[id] {
				delete(a.since, id)
				a.row[id] = 0
				continue
			}
			a.row[id]++
			a.worst = max(a.worst, a.row[id])
			if s, ok := a.since[id]; !ok {
				a.since[id] = at
			} else if at.Sub(s) >= availUnavailable {
				a.long[id]++
			}
		}
	}
}

// check stops the poller and fails t if some id was unavailable over availUnavailable.
func (a *availPoller) check(t *testing.T, what string) {
	t.Helper()
	a.end(t, what)
	a.verify(t, what)
}

// verify fails t if some id was unavailable over availUnavailable, once the poller ended.
func (a *availPoller) verify(t *testing.T, what string) {
	t.Helper()
	if len(a.long) > 0 {
		t.Fatalf("%s: ids unavailable in consecutive polls %v or more apart (id: polls ending such a span): %v; %d of %d polls found some unavailable, at most %d in a row",
			what, availUnavailable, a.long, a.failed, a.polls, a.worst)
	}
}

// movePollers poll every partition three ways while partitions move: a plain get (which
// a standby may answer), an exact get and a liked (which only an owner answers).
type movePollers struct{ plain, exact, liked *availPoller }

func startMovePollers(c *client.Client) *movePollers {
	ids := probeIDs()
	var uids []uint64 // one of each partition
	seen := map[int]bool{}
	for _, id := range ids {
		if p := pipeline.PartitionOf(pipeline.ID(id), 8); !seen[p] {
			seen[p], uids = true, append(uids, id)
		}
	}
	return &movePollers{plain: startPoller(c, ids), exact: startPoller(c, ids, client.Exact()),
		liked: startLikedPoller(c, uids, ids[:5])}
}

// check stops the pollers, logs what each saw, and fails t as availPoller.check does.
func (m *movePollers) check(t *testing.T, what string) {
	t.Helper()
	polls := []*availPoller{m.plain, m.exact, m.liked}
	kinds := []string{"get", "exact get", "liked"}
	for i, p := range polls {
		p.end(t, what+", "+kinds[i])
	}
	for i, p := range polls {
		p.verify(t, what+", "+kinds[i])
	}
}

// end stops the poller and logs what it saw.
func (a *availPoller) end(t *testing.T, what string) {
	t.Helper()
	close(a.stop)
	<-a.done
	t.Logf("%s: %d polls, %d found some partition unavailable (%d errors), at most %d in a row for one id, %d answered some ids stale (at most %d ms behind), the slowest in %v %v",
		what, a.polls, a.failed, a.errs, a.worst, a.stale, a.behindMs, a.slowest.Round(time.Millisecond), a.seen)
}

// availRig is a NATS server, a client of it and a producer streaming events into it
// until stopped.
type availRig struct {
	url  string
	c    *client.Client
	g    *gen
	stop chan struct{}
	wg   sync.WaitGroup
}

func newAvailRig(t *testing.T) *availRig {
	s := natstest.Start(t)
	c, err := client.New(natstest.Connect(t, s), client.WithTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	r := &availRig{url: s.ClientURL(), c: c, g: &gen{r: rand.New(rand.NewPCG(61, 62)), users: 300, posts: 300}, stop: make(chan struct{})}
	t.Cleanup(r.halt)
	return r
}

// stream publishes a chunk of events every 20 ms until finish, each until it is
// stored, with the same tx each time.
func (r *availRig) stream(t *testing.T) {
	r.wg.Go(func() {
		for chunk := 0; ; chunk++ {
			left := 100
			evs, tx := r.g.chunk(&left, 50, 50), "av."+strconv.Itoa(chunk)
			for {
				select {
				case <-r.stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
				if err := r.c.PublishBatch(context.Background(), tx, evs); err == nil {
					break
				}
			}
		}
	})
}

// halt stops the producer (once).
func (r *availRig) halt() {
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	r.wg.Wait()
}

// finish stops the producer and compares every count and relation with the reference
// model of the stored stream.
func (r *availRig) finish(t *testing.T) {
	t.Helper()
	r.halt()
	rig.WaitCaughtUp(t, r.c)
	compare(t, r.c, r.g)
}

// probeIDs are ids of every partition of 8.
func probeIDs() []uint64 {
	ids := make([]uint64, 64)
	for i := range ids {
		ids[i] = uint64(i + 1)
	}
	return ids
}

// TestJoinAvailable: a third tallyd joins two under a steady stream of events; it takes
// its share as standby takeovers, once its standbys of them are warm, while the two
// go on serving them.
func TestJoinAvailable(t *testing.T) {
	skipUnderRace(t)
	const partitions = 8
	r := newAvailRig(t)
	procs := []*availProc{startAvail(t, r.url), startAvail(t, r.url)}
	r.stream(t)
	waitSpread(t, procs, partitions)
	poll := startMovePollers(r.c)
	procs = append(procs, startAvail(t, r.url))
	waitSpread(t, procs, partitions)
	poll.check(t, "a third tallyd joined")
	r.finish(t)
}

// TestRejoinAvailable: of three tallyd, one is SIGKILLed — its partitions are taken
// over from their warm standbys, none restored — and started again on its data
// directory: it takes its share back as standby takeovers.
func TestRejoinAvailable(t *testing.T) {
	skipUnderRace(t)
	const partitions = 8
	r := newAvailRig(t)
	procs := []*availProc{startAvail(t, r.url), startAvail(t, r.url), startAvail(t, r.url)}
	r.stream(t)
	waitSpread(t, procs, partitions)
	restored := sum(procs[:2], "tally_partitions_taken_over_total") // the survivors'
	procs[2].signal(syscall.SIGKILL)
	// Exact: a plain get is answered by the standbys at once, before they take over.
	natstest.Eventually(t, time.Minute, "every partition answered after the kill", func() (bool, string) {
		g, err := r.c.GetWith(context.Background(), "user", probeIDs(), client.Exact())
		return err == nil && len(g.Unavailable) == 0, fmt.Sprint(err, g)
	})
	if after := sum(procs[:2], "tally_partitions_taken_over_total"); after < 0 || restored < 0 {
		t.Fatal("cannot read the survivors' metrics")
	} else if after != restored {
		t.Fatalf("%v partitions restored from backups at the kill, though every partition had a warm standby", after-restored)
	}
	poll := startMovePollers(r.c)
	procs[2].start()
	waitSpread(t, procs, partitions)
	poll.check(t, "a killed tallyd started again")
	r.finish(t)
}

// TestRollingRestart stops each of three tallyd in turn as an operator would (SIGTERM),
// starts it again on its data directory and waits until it owns its share again: the
// stop hands each partition to its warm standby, the start takes the share back.
func TestRollingRestart(t *testing.T) {
	skipUnderRace(t)
	const partitions = 8
	r := newAvailRig(t)
	procs := []*availProc{startAvail(t, r.url), startAvail(t, r.url), startAvail(t, r.url)}
	r.stream(t)
	waitSpread(t, procs, partitions)
	poll := startMovePollers(r.c)
	for _, p := range procs {
		p.signal(syscall.SIGTERM)
		p.start()
		waitSpread(t, procs, partitions)
	}
	poll.check(t, "a rolling restart")
	// Each partition moves to a warm standby; one whose standby fell behind a backup just
	// then (1 run in 3 here, restoring 2) is restored, and its reads wait that out.
	t.Logf("partitions restored from backups in the rolling restart: %v", sum(procs, "tally_partitions_taken_over_total"))
	r.finish(t)
}

// skipUnderRace skips an availability test with real tallyd processes under the race
// detector, which makes them too slow to keep a standby within StandbyLag on two
// cores; task avail runs them without it.
func skipUnderRace(t *testing.T) {
	t.Helper()
	if buildinfo.Race {
		t.Skip("its tallyd processes under the race detector cannot keep a standby within StandbyLag; run without -race (task avail)")
	}
}
