package systest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline/natstest"
	"github.com/tally-dev/tally/stages/event"
	"github.com/tally-dev/tally/stages/systest/rig"
	"github.com/tally-dev/tally/store/cold"
)

// TestRollingUpgradeFromKeyedEvents upgrades three real tallyd of a version before 1.8
// (TALLY_OLD_TALLYD, a binary built from an older commit: task upgrade) one at a time to
// this one under a steady stream of events: first with --keyed-events, the stream still
// stored by key, then restarted one at a time without it, the stream stored by
// partition; each tallyd is killed (SIGKILL) and its partitions go to warm standbys. No
// event may be dead-lettered for its subject, every partition must keep a warm standby,
// and every count, relation and unread ends as the reference model of the stored stream
// says. Without the flag an older tallyd still running dead-letters what is stored by
// partition, and its standbys of newer owners' partitions cannot follow their logs,
// which TALLY_UPGRADE_NO_FLAG=1 shows (the test then expects such dead letters).
func TestRollingUpgradeFromKeyedEvents(t *testing.T) {
	old := os.Getenv("TALLY_OLD_TALLYD")
	if old == "" {
		t.Skip("TALLY_OLD_TALLYD names no tallyd before 1.8 (task upgrade builds one)")
	}
	noFlag := os.Getenv("TALLY_UPGRADE_NO_FLAG") != ""
	cl := natstest.StartCluster(t, 3)
	procs, c := rig.StartTallyds(t, old, cl.URLs(), 3)
	r := &availRig{c: c, g: &gen{r: rand.New(rand.NewPCG(71, 72)), users: 300, posts: 300}, stop: make(chan struct{})}
	t.Cleanup(r.halt)
	r.stream(t)
	// What the tallyd logged of state of an older layout: a backup restored and moved,
	// window records moved as their partition loaded them.
	var restored, moved int
	note := func(p *rig.TallydProc) {
		restored += strings.Count(p.Logs(), "restored a backup of an older layout")
		moved += strings.Count(p.Logs(), "window records moved to this layout")
	}
	replace := func(i int, bin string, extra ...string) {
		t.Helper()
		procs[i].Kill()
		note(procs[i])
		procs[i] = rig.StartTallyd(t, bin, cl.URLs(), extra...)
		natstest.Eventually(t, 3*time.Minute, "every partition owned, with a warm standby", func() (bool, string) {
			owned, warm := 0.0, 0.0
			for _, p := range procs {
				m, err := p.Scrape(context.Background())
				if err != nil {
					return false, err.Error()
				}
				owned, warm = owned+m["tally_owned_partitions"], warm+m["tally_standby_partitions"]
			}
			// Without the flag an older standby of a newer owner's partition cannot follow
			// its log (it refuses the hop batches stored by partition): not warm.
			return owned == rig.TallydPartitions && (warm == rig.TallydPartitions || noFlag), fmt.Sprint("owned ", owned, ", warm ", warm)
		})
		time.Sleep(2 * time.Second) // events go on under the mixed cluster
	}
	bin := rig.Tallyd(t)
	for i := range procs {
		if noFlag {
			replace(i, bin)
		} else {
			replace(i, bin, "--keyed-events")
		}
	}
	if !noFlag {
		for i := range procs {
			replace(i, bin)
		}
	}
	r.halt()
	r.wg.Wait()
	for _, p := range procs {
		note(p)
	}
	t.Logf("backups of an older layout restored: %d; partitions whose window records moved: %d", restored, moved)
	if oldLayout := stateLayout(t, old); oldLayout < cold.Layout && restored == 0 {
		t.Errorf("no backup of the older tallyd's layout (%d) was restored: the upgrade moved no state", oldLayout)
	}
	js, err := jetstream.New(c.Conn())
	if err != nil {
		t.Fatal(err)
	}
	if noFlag { // an older owner's refused hop batch leaves a gap its next owner waits on
		refused := refusedSubjects(t, js)
		t.Logf("without --keyed-events: %d events dead-lettered for their subject", refused)
		if refused == 0 {
			t.Error("without --keyed-events no older tallyd refused an event stored by partition: the test shows nothing")
		}
		return
	}
	rig.WaitCaughtUp(t, c)
	st, err := js.Stream(context.Background(), c.Subjects().EventsStream())
	if err != nil {
		t.Fatal(err)
	}
	if d := st.CachedInfo().Config.SubjectTransform.Destination; strings.Contains(d, "wildcard(2)") {
		t.Errorf("after the upgrade the events stream still stores by key: %s", d)
	}
	if refused := refusedSubjects(t, js); refused > 0 {
		t.Fatalf("%d events dead-lettered for their subject during the upgrade", refused)
	}
	r.finish(t)
}

// stateLayout is the state layout the tallyd binary bin says it writes (--version).
func stateLayout(t *testing.T, bin string) int {
	t.Helper()
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s --version: %v: %s", bin, err, out)
	}
	_, after, _ := strings.Cut(string(out), "state layout ")
	n, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(after, " ", 2)[0]))
	if err != nil {
		t.Fatalf("%s --version says no state layout: %s", bin, out)
	}
	return n
}

// refusedSubjects is how many dead letters say their event's subject was refused.
func refusedSubjects(t *testing.T, js jetstream.JetStream) int {
	t.Helper()
	n := 0
	for _, dl := range readDLQ(t, js) {
		if strings.Contains(dl.Error, "unexpected subject") {
			n++
		}
	}
	return n
}

// readDLQ returns every dead letter stored so far, each asked again while the NATS
// cluster does not answer for a moment.
func readDLQ(t *testing.T, js jetstream.JetStream) []event.DeadLetter {
	t.Helper()
	ctx := context.Background()
	var out []event.DeadLetter
	read := func() error {
		out = out[:0]
		st, err := js.Stream(ctx, "TALLY_DLQ")
		if err != nil {
			return err
		}
		for seq := st.CachedInfo().State.FirstSeq; seq <= st.CachedInfo().State.LastSeq && seq > 0; seq++ {
			m, err := st.GetMsg(ctx, seq)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			var dl event.DeadLetter
			if err := json.Unmarshal(m.Data, &dl); err != nil {
				t.Fatalf("dead letter %d: %v", seq, err)
			}
			out = append(out, dl)
		}
		return nil
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		err := read()
		if err == nil {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("the dead letters: %v", err)
		}
	}
}
