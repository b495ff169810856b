package counter_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tally-dev/tally/pipeline/natstest"
	"github.com/tally-dev/tally/stages/counter"
	"github.com/tally-dev/tally/stages/flow"
)

// TestStaleReadOfStandby: a standby's worker, which answers no Get (its partition is
// another process's), answers Stale with what it has applied and how far behind its
// stream that is: nothing once caught up; while it is held (here in a checkpoint), the
// delta it has not applied, and counts that leave it out.
func TestStaleReadOfStandby(t *testing.T) {
	r := newRig(t)
	cfg := r.config()
	cfg.Valid = func() bool { return false } // a standby
	// Held in the first checkpoint past position holdPast, once set: the one of the
	// second delta, not a late one of the first (which a stale read, done by its asker
	// from the table, may find applied before its checkpoint).
	inside, release := make(chan struct{}), make(chan struct{})
	var w *counter.Worker
	var holdPast atomic.Uint64
	cfg.AfterCheckpoint = func() error {
		if past := holdPast.Load(); past != 0 && w.Position() > past && holdPast.CompareAndSwap(past, 0) {
			close(inside)
			<-release
		}
		return nil
	}
	w, _ = r.start(cfg)
	const x = 42
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := [][]uint64{make([]uint64, len(r.fam.Fields))}
	if err := w.Get(ctx, []uint64{x}, out); !errors.Is(err, counter.ErrNotOwned) {
		t.Fatalf("Get of a standby: %v, want ErrNotOwned", err)
	}
	stale := func() (uint64, flow.Behind) {
		t.Helper()
		b, err := w.Stale(ctx, []uint64{x}, out)
		if err != nil {
			t.Fatalf("Stale: %v", err)
		}
		return out[0][0], b
	}

	r.publish(1, 1, x, 3)
	natstest.Eventually(t, 5*time.Second, "the standby caught up", func() (bool, string) {
		n, b := stale()
		return n == 3 && b.Msgs == 0 && b.Age == 0, fmt.Sprintf("likes %d, behind %+v", n, b)
	})

	// Held in the checkpoint of its second delta, it answers what it has applied and
	// knows the third is not.
	holdPast.Store(r.last)
	r.publish(1, 2, x, 2)
	<-inside
	defer close(release)
	r.publish(1, 3, x, 4)
	natstest.Eventually(t, 5*time.Second, "the standby to know it is behind", func() (bool, string) {
		n, b := stale()
		if n != 5 {
			t.Fatalf("likes %d while held after the second delta, want 5", n)
		}
		return b.Msgs == 1, fmt.Sprintf("behind %+v, want 1 message", b)
	})
}
