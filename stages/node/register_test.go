package node

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/pipeline/natstest"
)

// A partition stopped while its start is still under way — its stage fenced at its first
// write (the lease not certainly held while a NATS server is lost), which stops it on
// its own goroutine — is not served here afterwards. The start registered the partition
// with the query server after the stop had taken it out, so that this process answered
// for it for good from workers and a stage that had stopped: relation reads from its own
// copy of the state (empty lists where the owner elsewhere had them), counter reads
// "may be owned by another process" (TestNATSClusterServerLoss: 1 402 answers wrong).
func TestStoppedAsItStartsIsNotServed(t *testing.T) {
	config := joinConfig(t, 2, time.Second, nil)
	cfg := config()
	var stopped atomic.Bool
	cfg.registerHook = func(n *Node, pt *owned) {
		if pt.p == 1 && stopped.CompareAndSwap(false, true) {
			n.stopPart(pt, leaveLost)
		}
	}
	// Later starts of partition 1 here wait: it is another process's by then.
	cfg.startHook = holdStarts(func(p int) bool { return p == 1 && stopped.Load() }, func(int) {}, t.Context().Done())
	n, _ := startFirst(t, cfg)
	natstest.Eventually(t, 10*time.Second, "partition 1 stopped as it started", func() (bool, string) {
		return stopped.Load() && !n.holds(1), ""
	})
	nc, err := nats.Connect(cfg.NATSURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for _, subj := range []string{n.subjects.PartEvents(1), n.subjects.Part("post", 1)} {
		_, err := nc.Request(subj, []byte("{}"), 2*time.Second)
		if !errors.Is(err, nats.ErrNoResponders) {
			t.Errorf("%s, of a partition stopped here: %v, want no responders (nothing serves it here)", subj, err)
		}
	}
	if _, err := nc.Request(n.subjects.PartEvents(0), []byte("{}"), 2*time.Second); errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("partition 0, started here, is not served: %v", err)
	}
}
