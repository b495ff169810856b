package counter_test

import (
	"context"
	"testing"
	"time"
)

// TestQueriesAnsweredDuringCheckpoint: while a checkpoint waits (for Badger, behind
// every other partition's commits, or stalled while it compacts a backlog), the
// partition still answers its readers, with what it has applied. Before, a query waited
// in the worker's loop until the checkpoint was done, and a get under load timed out.
func TestQueriesAnsweredDuringCheckpoint(t *testing.T) {
	r := newRig(t)
	cfg := r.config()
	inside, release := make(chan struct{}), make(chan struct{})
	first := true
	cfg.AfterCheckpoint = func() error { // called while the checkpoint is being taken
		if first {
			first = false
			close(inside)
			<-release
		}
		return nil
	}
	w, _ := r.start(cfg)
	const x = 42
	r.publish(1, 1, x, 3)
	<-inside
	defer close(release)
	// The checkpoint does not end until the query has answered: a worker that answers
	// only between checkpoints never does.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := [][]uint64{make([]uint64, len(r.fam.Fields))}
	if err := w.Get(ctx, []uint64{x}, out); err != nil {
		t.Fatalf("a query during a checkpoint: %v", err)
	}
	if out[0][0] != 3 {
		t.Fatalf("likes of %d: %d, want 3", x, out[0][0])
	}
}
