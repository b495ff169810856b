package systest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/natstest"
	"github.com/tally-dev/tally/stages/node"
	"github.com/tally-dev/tally/stages/systest/rig"
)

// The metrics of a tallyd process the cluster benchmarks read (stages/metrics).
const (
	metricApplied    = "tally_events_applied_total" // events applied by this process's event stages
	metricFlushed    = "tally_flushed_ids_total"    // ids written by its counter checkpoints
	metricOwned      = "tally_owned_partitions"     // partitions it owns
	metricEvents     = "tally_owns_event_stages"    // 1 when it owns every event stage (before issue 15)
	metricBackups    = "tally_state_backups_total"  // rounds of state backups it stored
	metricStandby    = "tally_standby_partitions"   // partitions it keeps a warm copy of
	metricStandbyLag = "tally_standby_lag"          // messages those copies have not applied
	metricWarm       = "tally_partitions_taken_over_warm_total"
)

// benchPartitions is the partition count of the cluster benchmarks (as benchTally's).
const benchPartitions = rig.TallydPartitions

// procSample is what a process has done so far.
type procSample struct {
	applied, flushed float64
	cpu              time.Duration
}

func sampleProcs(b *testing.B, ps []*rig.TallydProc) []procSample {
	b.Helper()
	out := make([]procSample, len(ps))
	for i, p := range ps {
		m := p.MustScrape(b)
		out[i] = procSample{applied: m[metricApplied], flushed: m[metricFlushed], cpu: p.CPU(b)}
	}
	return out
}

// benchProcs is benchTally (the 70 % likes mix, published with the Go client in the same
// batches, every count checked) with each tallyd a process of its own on a three-server
// NATS cluster (streams R3, state backed up, every event-stage transaction logged). It
// reports, from each process's /metrics and /proc/<pid>/stat read before and after the
// run, the largest share of the events one process applied (max-process-share: 1 when
// one process applies everything, 1/procs when they are spread evenly) and the CPU
// seconds each process spent per million events (cpu-s/Mev-p<i>, user and system).
// With -procs.cpuprofile it also profiles each process from the start of the run (where
// standbys cost what they cost: in the processes, not in the benchmark's own).
func benchProcs(b *testing.B, tallyd func(testing.TB) string, procs int, extra ...string) {
	bin := tallyd(b)
	cl := natstest.StartCluster(b, 3)
	if *procsProfile != "" {
		extra = append(slices.Clip(extra), "--pprof")
	}
	ps, c := rig.StartTallyds(b, bin, cl.URLs(), procs, extra...)
	// With several processes and standbys on (the default), the run starts once every
	// partition has a warm standby and ends once they have applied it all: a standby
	// still priming when the events come, or behind when the owners are done, left its
	// cost out of the run (with and without standbys measured 0.68–0.82× in 300 000-event
	// runs that ended before the standbys caught up, 0.50–0.54× in others).
	standbys := procs > 1 && !slices.Contains(extra, "--standbys=false")
	if standbys {
		rig.WaitHealthy(b, c, 5*time.Minute)
		waitStandbys(b, ps, 10*time.Minute)
	}
	evs, want := benchMix(b.N, 7)
	before := sampleProcs(b, ps)
	b.ResetTimer()
	profiled := profileProcs(b, ps)
	publishBench(b, c, evs)
	published := b.Elapsed()
	rig.WaitHealthy(b, c, 5*time.Minute)
	if standbys {
		waitStandbys(b, ps, 5*time.Minute)
	}
	b.StopTimer()
	after := sampleProcs(b, ps)
	profiled()
	b.ReportMetric(float64(b.N)/published.Seconds(), "published/s")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	var applied, most, flushed float64
	mev := float64(b.N) / 1e6
	for i := range ps {
		d := after[i].applied - before[i].applied
		applied, most, flushed = applied+d, max(most, d), flushed+after[i].flushed-before[i].flushed
		cpu := (after[i].cpu - before[i].cpu).Seconds()
		b.ReportMetric(cpu/mev, "cpu-s/Mev-p"+strconv.Itoa(i))
		b.Logf("process %d (pid %d): %.0f events applied, %.2f CPU s", i, ps[i].Pid(), d, cpu)
	}
	if applied == 0 {
		b.Fatalf("no process counted an applied event (%s)", metricApplied)
	}
	b.Logf("%.3f events applied per event published (1 unless an event is counted twice)", applied/float64(b.N))
	b.ReportMetric(most/applied, "max-process-share")
	b.ReportMetric(flushed/float64(b.N), "writes/event")
	checkBench(b, c, want)
}

var (
	procsProfile    = flag.String("procs.cpuprofile", "", "benchProcs writes each tallyd's CPU profile to this directory (proc<i>.prof, the last run's)")
	procsProfileFor = flag.Duration("procs.cpuprofile.for", 10*time.Second, "how long each -procs.cpuprofile runs from the start of the timed run")
)

// profileProcs starts a CPU profile of each of ps (served with --pprof) when
// -procs.cpuprofile names a directory, and returns what waits for them and writes them
// there.
func profileProcs(b *testing.B, ps []*rig.TallydProc) (wait func()) {
	if *procsProfile == "" {
		return func() {}
	}
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Go(func() {
			data, err := p.CPUProfile(context.Background(), *procsProfileFor)
			if err == nil {
				err = os.WriteFile(filepath.Join(*procsProfile, "proc"+strconv.Itoa(i)+".prof"), data, 0o644)
			}
			if err != nil {
				b.Error(err)
			}
		})
	}
	return wg.Wait
}

// waitStandbys waits until every partition has a standby in one of ps caught up with
// its owner (the processes' tally_standby_partitions and tally_standby_lag).
func waitStandbys(b *testing.B, ps []*rig.TallydProc, timeout time.Duration) {
	natstest.Eventually(b, timeout, "a standby of every partition, caught up", func() (bool, string) {
		sum, lag := 0.0, 0.0
		for i, p := range ps {
			m, err := p.Scrape(context.Background())
			if err != nil {
				return false, fmt.Sprint("process ", i, ": ", err)
			}
			sum, lag = sum+m[metricStandby], lag+m[metricStandbyLag]
		}
		return sum >= benchPartitions && lag == 0, fmt.Sprint(sum, " standbys ready, ", lag, " messages behind")
	})
}

var failoverIDs = flag.Int("failover.ids", 0, "ids BenchmarkFailover's large case preloads instead of 1M, e.g. 27000000 for ~10M in the killed process's partitions")

// BenchmarkFailover is the time from a SIGKILL of the tallyd owning the most partitions
// (of three processes on a three-server NATS cluster, default lease TTL) until every
// partition answers again: a tally.get of an id in each partition asking exact counts
// (failover-s), and a tally.liked of a user in each (liked-s), polled every 50 ms;
// stale-get-s is when a plain tally.get of them all answers every id, counted by the
// standbys before they take over (stale). ids-1M first preloads a
// million ids (views of distinct posts) and waits for a backup round, so the survivors
// restore that state; killed-parts and killed-ids say how much the killed process held.
// Every preloaded count is checked after. One failover per run whatever b.N: run with
// -benchtime 1x.
// Run: go test ./stages/systest -run XXX -bench Failover -benchtime 1x [-failover.ids 10000000]
func BenchmarkFailover(b *testing.B) {
	tallyd := rig.Tallyd
	big := 1_000_000
	if *failoverIDs > 0 {
		big = *failoverIDs
	}
	for _, ids := range []int{0, big} {
		b.Run("ids-"+countName(ids), func(b *testing.B) { benchFailover(b, tallyd(b), ids) })
	}
}

// countName is n as 1M, 250k or 12.
func countName(n int) string {
	switch {
	case n > 0 && n%1_000_000 == 0:
		return strconv.Itoa(n/1_000_000) + "M"
	case n > 0 && n%1000 == 0:
		return strconv.Itoa(n/1000) + "k"
	}
	return strconv.Itoa(n)
}

// failoverProbe is a post and a user of one partition: the user liked the post, which
// was viewed once.
type failoverProbe struct{ post, user uint64 }

// probesFrom finds a probe for each partition: posts from post upwards, users from user
// upwards, each the first of its partition.
func probesFrom(post, user uint64) []failoverProbe {
	out := make([]failoverProbe, benchPartitions)
	for p := range out {
		for pipeline.PartitionOf(pipeline.ID(post), benchPartitions) != p {
			post++
		}
		for pipeline.PartitionOf(pipeline.ID(user), benchPartitions) != p {
			user++
		}
		out[p] = failoverProbe{post, user}
		post++
		user++
	}
	return out
}

// preloadRound is how many preloaded views a failover benchmark publishes before it
// waits for the cluster to apply them. Published as fast as JetStream stored them, 27 M
// views piled up faster than the three processes applied them, and the three
// nats-servers (in the benchmark's process, on the same 2 cores) answered the lease
// renewals too late: the leases lapsed in storms, and the run was not healthy 10
// minutes after the preload.
const preloadRound = 16 * benchBatch * 64

func benchFailover(b *testing.B, bin string, ids int) {
	cl := natstest.StartCluster(b, 3)
	ps, c := rig.StartTallyds(b, bin, cl.URLs(), 3)
	if dir := os.Getenv("TALLY_BENCH_LOGS"); dir != "" { // each process's log to the end, to read
		b.Cleanup(func() {
			for i, p := range ps {
				if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("tallyd-%d.log", i)), []byte(p.Logs()), 0o644); err != nil {
					b.Error(err)
				}
			}
		})
	}
	ctx := context.Background()
	// Posts are recent snowflake ids, so they stay in RAM (older ones age to the cold
	// tier); users are below 2^40, ids without a time.
	base := uint64(time.Now().UnixMilli()-node.SnowflakeEpoch) << 22
	for i := 0; i < ids; i += benchBatch * 16 {
		if i > 0 && i%preloadRound == 0 {
			rig.WaitHealthy(b, c, 10*time.Minute)
		}
		evs := make([]pipeline.Event, 0, benchBatch*16)
		for id := base + uint64(i); id < base+uint64(min(i+benchBatch*16, ids)); id++ {
			evs = append(evs, pipeline.Event{Type: "view", Post: pipeline.ID(id), N: 1})
		}
		if err := c.PublishBatch(ctx, "preload."+strconv.Itoa(i), evs); err != nil {
			b.Fatal(err)
		}
	}
	probes := probesFrom(base+uint64(ids), 1_000_000_000)
	var evs []pipeline.Event
	for _, pr := range probes {
		evs = append(evs, pipeline.Event{Type: "view", Post: pipeline.ID(pr.post), N: 1},
			pipeline.Event{Type: "like", UID: pipeline.ID(pr.user), Post: pipeline.ID(pr.post)})
	}
	if err := c.PublishBatch(ctx, "probes", evs); err != nil {
		b.Fatal(err)
	}
	rig.WaitHealthy(b, c, 10*time.Minute)
	// A backup round of every process after the preload, as in a long-running cluster:
	// the survivors restore the state, then replay only what came after.
	backups := make([]float64, len(ps))
	for i, p := range ps {
		backups[i] = p.MustScrape(b)[metricBackups]
	}
	// Backups are paced (a round that took t waits at least 3t before the next): with
	// 10 M ids a process, a round after the preload took 4.5 minutes, the next was due
	// 13.5 minutes after it.
	natstest.Eventually(b, 30*time.Minute, "a state backup round of every process", func() (bool, string) {
		for i, p := range ps {
			if m, err := p.Scrape(ctx); err != nil || m[metricBackups] <= backups[i] {
				return false, fmt.Sprint("process ", i, ": ", err)
			}
		}
		return true, ""
	})
	// Every partition has a ready standby, as in a long-running cluster (a standby is
	// primed from the backup, then follows).
	waitStandbys(b, ps, 10*time.Minute)
	askGet, askLiked := probeAsks(c, probes, client.Exact())
	askStale, _ := probeAsks(c, probes)
	for _, ask := range []func(context.Context) error{askGet, askLiked, askStale} {
		if err := ask(ctx); err != nil {
			b.Fatalf("before the kill: %v", err)
		}
	}
	victim, owned, best := 0, 0.0, -1.0
	for i, p := range ps {
		m := p.MustScrape(b)
		// The most partitions; on a tie the owner of the event stages (before issue 15).
		if score := m[metricOwned] + m[metricEvents]/2; score > best {
			victim, owned, best = i, m[metricOwned], score
		}
	}
	warmBefore := 0.0
	for i, p := range ps {
		if i != victim {
			warmBefore += p.MustScrape(b)[metricWarm]
		}
	}
	b.ResetTimer()
	ps[victim].Kill()
	killed := time.Now()
	var got, liked, stale time.Duration
	var errGot, errLiked, errStale error
	var wg sync.WaitGroup
	wg.Go(func() { got, errGot = untilAnswers(killed, askGet) })
	wg.Go(func() { liked, errLiked = untilAnswers(killed, askLiked) })
	wg.Go(func() { stale, errStale = untilAnswers(killed, askStale) })
	wg.Wait()
	b.StopTimer()
	b.Logf("killed process %d (owning %.0f partitions; event stages %v): exact get answered after %v, liked after %v, get after %v",
		victim, owned, best > owned, got.Round(time.Millisecond), liked.Round(time.Millisecond), stale.Round(time.Millisecond))
	if errStale != nil {
		b.Errorf("tally.get (stale allowed): %v", errStale)
	} else {
		b.ReportMetric(stale.Seconds(), "stale-get-s")
	}
	if errGot != nil {
		b.Fatalf("tally.get: %v", errGot)
	}
	b.ReportMetric(got.Seconds(), "failover-s")
	b.ReportMetric(owned, "killed-parts")
	// Preloaded ids hash evenly over the partitions: the killed process held about this
	// many of them (-failover.ids 27M puts ~10M in 6 partitions of 16).
	b.ReportMetric(float64(ids)*owned/benchPartitions, "killed-ids")
	if errLiked != nil {
		b.Errorf("tally.liked: %v", errLiked)
	} else {
		b.ReportMetric(liked.Seconds(), "liked-s")
	}
	warm := -warmBefore
	for i, p := range ps {
		if i != victim {
			warm += p.MustScrape(b)[metricWarm]
		}
	}
	b.ReportMetric(warm, "warm-parts") // of killed-parts, taken over from standbys
	// The rejoin is measured first, and every preloaded id checked once at the end: a
	// check of 27 M ids takes minutes, and a lease lapsing in it (on this machine: three
	// nats-servers in the benchmark's process, beside a takeover's backups) moved
	// partitions under the rejoin that the rejoin did not cause.
	rig.WaitHealthy(b, c, 10*time.Minute)
	rejoin(b, ps[victim], float64(benchPartitions/len(ps)), askGet)
	rig.WaitHealthy(b, c, 10*time.Minute)
	checkViews(b, c, base, ids)
}

// rejoinWait is how long a rejoin may take to give the killed process its share back.
// Each partition moves once its standby there is warm, and a process primes one standby
// at a time: with 10 M ids in the killed partitions, on this machine, 30 s to 3 minutes
// each.
const rejoinWait = 20 * time.Minute

// rejoin starts the killed process p again on its data directory, with the two
// survivors owning every partition, and asks askGet every 50 ms until p owns its share
// (at least want partitions) again: rejoin-s is the longest time some partition did not
// answer (from the first poll that failed to the next that succeeded), rejoin-failed
// the polls that failed.
func rejoin(b *testing.B, p *rig.TallydProc, want float64, askGet func(context.Context) error) {
	p.Restart(b)
	started := time.Now()
	var down time.Time
	var gap time.Duration
	polls, failed := 0, 0
	for owned := 0.0; owned < want || !down.IsZero(); polls++ {
		if time.Since(started) > rejoinWait {
			b.Fatalf("the killed process owns %v partitions %v after its restart, want %v", owned, rejoinWait, want)
		}
		at := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := askGet(ctx)
		cancel()
		switch {
		case err != nil:
			failed++
			if down.IsZero() {
				down = at
				if os.Getenv("TALLY_BENCH_LOGS") != "" {
					fmt.Fprintf(os.Stderr, "rejoin: a poll failed at %s, %v after the restart: %v\n", at.UTC().Format("15:04:05.000"), at.Sub(started).Round(time.Millisecond), err)
				}
			}
		case !down.IsZero():
			gap, down = max(gap, at.Sub(down)), time.Time{}
		}
		if polls%10 == 0 {
			if m, err := p.Scrape(context.Background()); err == nil {
				owned = m[metricOwned]
			}
		}
		time.Sleep(max(0, 50*time.Millisecond-time.Since(at)))
	}
	b.Logf("rejoin: the killed process owns its share %v after its restart; %d of %d polls failed, the longest for %v",
		time.Since(started).Round(time.Millisecond), failed, polls, gap.Round(time.Millisecond))
	b.ReportMetric(gap.Seconds(), "rejoin-s")
	b.ReportMetric(float64(failed), "rejoin-failed")
}

// probeAsks returns two questions about the probes, each an error until every partition
// answers it right: a tally.get of each probe's post (its like and view) and user, with
// opts, and a tally.liked of each probe's user and post.
func probeAsks(c *client.Client, probes []failoverProbe, opts ...client.GetOption) (get, liked func(context.Context) error) {
	var posts, users []uint64
	for _, pr := range probes {
		posts, users = append(posts, pr.post), append(users, pr.user)
	}
	get = func(ctx context.Context) error {
		for _, family := range []string{"post", "user"} {
			ids := posts
			if family == "user" {
				ids = users
			}
			r, err := c.GetWith(ctx, family, ids, opts...)
			if err != nil {
				return err
			}
			if len(r.Unavailable) > 0 {
				return fmt.Errorf("%s: %d ids unavailable, e.g. %d", family, len(r.Unavailable), r.Unavailable[0])
			}
			for i := range ids {
				if family == "post" && (r.Counts[i][0] != 1 || r.Counts[i][3] != 1) {
					return fmt.Errorf("post %d of partition %d: %v, want a like and a view", ids[i], i, r.Counts[i])
				}
			}
		}
		return nil
	}
	liked = func(ctx context.Context) error {
		for p, pr := range probes {
			l, err := c.Liked(ctx, pr.user, pr.post)
			if err != nil {
				return fmt.Errorf("partition %d: %w", p, err)
			}
			if len(l) != 1 || !l[0] {
				return fmt.Errorf("partition %d: user %d liked post %d: %v, want true", p, pr.user, pr.post, l)
			}
		}
		return nil
	}
	return get, liked
}

// errNoAnswer: a question was not answered right within untilAnswers' deadline.
var errNoAnswer = errors.New("no right answer")

// untilAnswers asks every 50 ms (each ask bounded by a second) until ask succeeds, and
// returns how long after start that was; after three minutes it gives up with the last
// error.
func untilAnswers(start time.Time, ask func(context.Context) error) (time.Duration, error) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last error
	for time.Since(start) < 3*time.Minute {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := ask(ctx)
		cancel()
		if err == nil {
			if last != nil && os.Getenv("TALLY_BENCH_LOGS") != "" {
				fmt.Fprintf(os.Stderr, "answered after %v; the last wrong answer: %v\n", time.Since(start), last)
			}
			return time.Since(start), nil
		}
		last = err
		<-tick.C
	}
	return 0, fmt.Errorf("%w in 3 minutes: %w", errNoAnswer, last)
}

// checkViews fails the benchmark unless each of the n posts from base has one view.
func checkViews(b *testing.B, c *client.Client, base uint64, n int) {
	b.Helper()
	ids := make([]uint64, 0, 1000)
	for i := 0; i < n; i += 1000 {
		ids = ids[:0]
		for id := base + uint64(i); id < base+uint64(min(i+1000, n)); id++ {
			ids = append(ids, id)
		}
		r := getAvailable(b, c, ids)
		for j, id := range ids {
			if r.Counts[j][3] != 1 {
				b.Fatalf("post %d: %v, want one view", id, r.Counts[j])
			}
		}
	}
}

// getAvailable gets the posts ids once every one of them is available. The check of
// many millions of ids takes minutes, and on this machine a lease can lapse meanwhile
// (three nats-servers, three tallyd and the benchmark on 2 cores): its partition is
// owned by no process for the hand-over's seconds, which is not a wrong count. A
// minute without every id is.
func getAvailable(b *testing.B, c *client.Client, ids []uint64) *pipeline.GetReply {
	b.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		r, err := c.Get(context.Background(), "post", ids...)
		switch {
		case err == nil && len(r.Unavailable) == 0:
			return r
		case time.Now().After(deadline) && err != nil:
			b.Fatal(err)
		case time.Now().After(deadline):
			b.Fatalf("%d posts unavailable for a minute after every partition caught up, e.g. %d", len(r.Unavailable), r.Unavailable[0])
		}
		if err == nil {
			b.Logf("%d posts unavailable (a hand-over?), asking again", len(r.Unavailable))
		} else {
			b.Logf("a get failed (a hand-over?), asking again: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
