package node

import (
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/tally-dev/tally/stages/query"
)

// A standby must see each backup of a piece reached while that backup is current: the
// owner purges up to the backup before the current one, so a backup replaced before it
// was reached, or never seen at all, may have been purged past.
func TestBackupWatch(t *testing.T) {
	type step struct {
		gen     uint64
		reached bool
		ok      bool
	}
	for name, steps := range map[string][]step{
		"each backup reached":            {{1, false, true}, {1, true, true}, {2, false, true}, {2, true, true}, {3, true, true}, {4, false, true}},
		"reached late, on the next one":  {{1, false, true}, {2, true, false}},
		"a backup passed between looks":  {{1, true, true}, {3, true, false}},
		"reached once is enough":         {{1, true, true}, {1, false, true}, {2, false, true}},
		"the backup primed from, passed": {{2, true, false}},
	} {
		w := backupWatch{gen: 0, reached: true} // primed from generation 0
		for i, s := range steps {
			if got := w.observe(s.gen, s.reached); got != s.ok {
				t.Fatalf("%s: step %d (generation %d, reached %v): ok %v, want %v", name, i, s.gen, s.reached, got, s.ok)
			}
		}
	}
}

// A partition whose stop is under way counts as held: a round must not start it again
// in this process until the stop is over, or two runs of it write the same keys (a lease
// lost and retaken at once lost counts: TestNATSClusterServerLoss under -race).
func TestNoRestartWhileStopping(t *testing.T) {
	n := &Node{parts: map[int]*part{}, log: slog.New(slog.DiscardHandler),
		query: query.New(query.Config{Partitions: 2}, nil, nil, nil, slog.New(slog.DiscardHandler))}
	pt := &part{p: 1, cancel: func() {}}
	pt.wg.Add(1) // its stage and workers, still stopping
	n.parts[1] = pt
	stopped := make(chan struct{})
	go func() {
		n.stopPart(1, leaveLost)
		close(stopped)
	}()
	begun := func() bool {
		n.mu.RLock()
		defer n.mu.RUnlock()
		return n.parts[1] == nil // stopPart has taken it out
	}
	for deadline := time.Now().Add(5 * time.Second); !begun(); runtime.Gosched() {
		if time.Now().After(deadline) {
			t.Fatal("stopPart did not begin")
		}
	}
	if !n.holds(1) {
		t.Fatal("a partition being stopped is not held: a round would start it again")
	}
	pt.wg.Done()
	<-stopped
	if n.holds(1) {
		t.Fatal("a stopped partition is still held: it would never start again here")
	}
}
