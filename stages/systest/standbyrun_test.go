package systest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tally-dev/tally/stages/node"
	"github.com/tally-dev/tally/stages/systest/rig"
)

// TestStandbyTakeover: two tallyd share the partitions, each keeping warm copies of the
// other's, while events stream in; the first leaves and the second takes its partitions
// over from its standbys, restoring nothing. With backups (and purges) every few
// milliseconds and standbys that look at them only every 3 seconds, the standbys miss backups
// again and again and start over from the newest: counts and relations stay exact
// either way.
func TestStandbyTakeover(t *testing.T) {
	for _, tc := range []struct {
		name   string
		backup time.Duration
	}{{"following", 300 * time.Millisecond}, {"falling behind", 5 * time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			const partitions = 4
			behind := tc.backup < 100*time.Millisecond
			url, c := rig.NATSServer(t)
			start := func() *node.Node {
				return rig.StartJoiner(t, url, func(cfg *node.Config) {
					cfg.Partitions, cfg.BackupEvery, cfg.LeaseTTL = partitions, tc.backup, time.Second
					cfg.PurgeEvery = 10 * time.Millisecond
					if behind { // never warm: the join moves partitions once out of patience
						cfg.StandbyCheck, cfg.MovePatience = 3*time.Second, 2*time.Second
						cfg.BackupRest = -1 // back to back, as a cluster's backups were before they were paced
					}
				})
			}
			a := start()
			g := &gen{r: rand.New(rand.NewPCG(5, 6)), users: 200, posts: 200}
			total := 8_000
			var b *node.Node
			var aParts []int
			var restored, warm int64
			for chunk := 0; total > 0; chunk++ {
				publishRetrying(t, c, "sb."+strconv.Itoa(chunk), g.chunk(&total, 200, 200))
				switch chunk {
				case 3:
					b = start()
					rig.Eventually(t, "two tallyd share the partitions", func() (bool, string) {
						return len(a.Parts()) == 2 && len(b.Parts()) == 2, fmt.Sprintf("a owns %v, b %v", a.Parts(), b.Parts())
					})
				case 20:
					if behind { // its standbys start again and again
						// Events go on coming meanwhile: a partition that is idle is not
						// backed up again, and its standby then misses no backup.
						sent, last := 0, time.Now()
						rig.Eventually(t, "a standby fell behind the backups and started again", func() (bool, string) {
							if total > 0 && time.Since(last) > 100*time.Millisecond {
								publishRetrying(t, c, "sb.wait."+strconv.Itoa(sent), g.chunk(&total, 50, 50))
								sent, last = sent+1, time.Now()
							}
							n := a.StandbyRestarts.Load() + b.StandbyRestarts.Load()
							return n > 0, fmt.Sprint(n, " restarts")
						})
					} else {
						rig.Eventually(t, "each a standby of the other's partitions, at their current backups", func() (bool, string) {
							return slices.Equal(b.Standbys(), a.Parts()) && slices.Equal(a.Standbys(), b.Parts()),
								fmt.Sprintf("a owns %v, keeps %v; b owns %v, keeps %v", a.Parts(), a.Standbys(), b.Parts(), b.Standbys())
						})
						// A profile tells an owner's work from its standby's (flow.Label).
						waitRoles(t, partitions, "owner", "standby")
						// Events after the standbys are warm, so that they follow their
						// owners' log records: a standby that primed from a backup taken
						// after every event so far had none to apply (a CI run under
						// load, where the check below then found none applied).
						publishRetrying(t, c, "sb.warm", g.chunk(&total, 200, 200))
						rig.Eventually(t, "the standbys applied log records of their owners'", func() (bool, string) {
							n := a.StandbyEvents.MirroredWrites.Load() + b.StandbyEvents.MirroredWrites.Load() +
								a.StandbyEvents.MirroredEvents.Load() + b.StandbyEvents.MirroredEvents.Load()
							return n > 0, fmt.Sprint(n, " applied")
						})
					}
					aParts, restored, warm = a.Parts(), b.PartsRestored.Load(), b.PartsWarm.Load()
					if err := a.Close(); err != nil {
						t.Fatal(err)
					}
					rig.Eventually(t, "the second owns every partition", func() (bool, string) {
						return len(b.Parts()) == partitions, fmt.Sprint(b.Parts())
					})
					if !behind { // the standbys' workers go on as the owner's, and say so
						waitRoles(t, partitions, "owner")
					}
				}
			}
			rig.WaitCaughtUp(t, c)
			compare(t, c, g)
			t.Logf("the second took %d partitions over warm, restored %d (some when it joined); standbys started again %d and %d times",
				b.PartsWarm.Load(), b.PartsRestored.Load(), a.StandbyRestarts.Load(), b.StandbyRestarts.Load())
			// A standby may start again just then (it fell behind a backup on a busy
			// machine), and that partition is restored: at least one is taken warm.
			if !behind && b.PartsWarm.Load() == warm {
				t.Fatalf("the second restored %d of the first's partitions %v from backups and took none from its standbys", b.PartsRestored.Load()-restored, aParts)
			}
			// The owners' log records carry their transactions' writes, and the standbys
			// apply them: none executes events again.
			written := a.StandbyEvents.MirroredWrites.Load() + b.StandbyEvents.MirroredWrites.Load()
			executed := a.StandbyEvents.MirroredEvents.Load() + b.StandbyEvents.MirroredEvents.Load()
			if !behind && (written == 0 || executed != 0) {
				t.Fatalf("the standbys applied %d log records from their writes and executed the events of %d, want all from their writes", written, executed)
			}
			if behind && a.StandbyRestarts.Load()+b.StandbyRestarts.Load() == 0 {
				t.Fatal("no standby fell behind a backup: the test did not test that")
			}
		})
	}
}

// waitRoles waits until the goroutines of every stage (event, counter) of each of the
// partitions run in exactly the roles given, as their profile labels say (flow.Label).
func waitRoles(t *testing.T, partitions int, want ...string) {
	t.Helper()
	rig.Eventually(t, fmt.Sprint("every partition's stages labelled ", want, " for profiles"), func() (bool, string) {
		got := labelledRoles(t)
		for p := range partitions {
			for _, stage := range []string{"event", "counter"} {
				k := stage + "/" + strconv.Itoa(p)
				if !slices.Equal(got[k], want) {
					return false, fmt.Sprintf("%s: %v", k, got[k])
				}
			}
		}
		return true, ""
	})
}

// labelledRoles reads the profile labels of the goroutines running a stage — an event
// stage's Run or Mirror, a counter worker's Run; those they start for a moment (a
// checkpoint's write, a snapshot) are left out — and returns for each stage and
// partition ("event/3") the roles they run in, sorted.
func labelledRoles(t *testing.T) map[string][]string {
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 1); err != nil {
		t.Fatal(err)
	}
	roles := map[string][]string{}
	for rec := range strings.SplitSeq(buf.String(), "\n\n") {
		if !strings.Contains(rec, "event.(*Stage).Run+") && !strings.Contains(rec, "event.(*Stage).Mirror+") && !strings.Contains(rec, "counter.(*Worker).Run+") {
			continue
		}
		var l map[string]string
		for line := range strings.Lines(rec) {
			if text, ok := strings.CutPrefix(strings.TrimSpace(line), "# labels: "); ok {
				if err := json.Unmarshal([]byte(text), &l); err != nil {
					t.Fatalf("labels %q: %v", text, err)
				}
			}
		}
		if l["stage"] == "" {
			t.Fatalf("a stage's goroutine without labels:\n%s", rec)
		}
		if l["stage"] == "counter" && l["family"] == "" {
			t.Fatalf("a counter's goroutine labelled without its family: %v", l)
		}
		k := l["stage"] + "/" + l["partition"]
		if !slices.Contains(roles[k], l["role"]) {
			roles[k] = append(roles[k], l["role"])
			slices.Sort(roles[k])
		}
	}
	return roles
}

// TestRestoreReplaysWrites: a tallyd SIGKILLed with log records after its partitions'
// last backups (none, here), and a new one on an empty directory that takes them over
// with no standby of them: it restores what was backed up and replays the log after it
// from the writes the records carry (standbys on), executing none of their events.
// Counts and relations stay exact.
func TestRestoreReplaysWrites(t *testing.T) {
	bin := rig.Tallyd(t)
	url, c := rig.NATSServer(t)
	a := rig.StartTallyd(t, bin, url) // backups every 30 s: none before the kill
	rig.WaitHealthy(t, c, time.Minute)
	g := &gen{r: rand.New(rand.NewPCG(7, 8)), users: 200, posts: 200}
	total := 4_000
	for chunk := 0; total > 0; chunk++ {
		publishRetrying(t, c, "rr."+strconv.Itoa(chunk), g.chunk(&total, 100, 100))
	}
	rig.WaitCaughtUp(t, c)
	a.Kill()
	b := rig.StartTallyd(t, bin, url)
	rig.WaitHealthy(t, c, time.Minute)
	rig.WaitCaughtUp(t, c)
	compare(t, c, g)
	m := b.MustScrape(t)
	if n := m["tally_log_records_replayed_from_writes_total"]; n == 0 {
		t.Fatalf("the new owner replayed no log record from its writes; it applied %v events", m["tally_events_applied_total"])
	}
}
