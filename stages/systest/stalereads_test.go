package systest

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/pipeline/natstest"
)

// TestKillReadsStale: of three tallyd under a stream of events, each partition with a
// warm standby, one is SIGKILLed. Until its partitions are taken over (its lease, 2 s,
// runs out first) nobody owns them: a get answers their ids from their standbys, marked
// stale, so that a reader polling every 50 ms never finds an id unavailable; a reader
// asking for exact counts finds them unavailable meanwhile. Every count is exact at the
// end. Before, every reader found them unavailable for the length of the gap.
func TestKillReadsStale(t *testing.T) {
	skipUnderRace(t)
	const partitions = 8
	r := newAvailRig(t)
	procs := []*availProc{startAvail(t, r.url), startAvail(t, r.url), startAvail(t, r.url)}
	r.stream(t)
	waitSpread(t, procs, partitions)
	// The readers start once the process is gone: a get in flight to it then, or waiting
	// for its answer, would be lost until its timeout, which would hide the gap.
	procs[2].signal(syscall.SIGKILL)
	poll, exact := startPoller(r.c, probeIDs()), startPoller(r.c, probeIDs(), client.Exact())
	natstest.Eventually(t, time.Minute, "every partition owned again", func() (bool, string) {
		g, err := r.c.GetWith(context.Background(), "user", probeIDs(), client.Exact())
		return err == nil && len(g.Unavailable) == 0, fmt.Sprint(err, g)
	})
	exact.end(t, "exact reads across the kill")
	poll.check(t, "reads across the kill")
	if poll.listed > 0 || poll.errs > 0 {
		t.Errorf("%d of %d polls found some id unavailable, %d failed: a standby answers while a partition has no owner",
			poll.listed, poll.polls, poll.errs)
	}
	if poll.stale == 0 {
		t.Errorf("no poll of %d answered an id stale: the kill left no gap to see?", poll.polls)
	}
	if exact.stale > 0 {
		t.Errorf("%d exact polls answered ids stale", exact.stale)
	}
	if exact.listed == 0 {
		t.Logf("no exact poll found an id unavailable: the gap fell between polls")
	}
	r.finish(t)
}
