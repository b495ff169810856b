package counter_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/natstest"
	"github.com/tally-dev/tally/stages/counter"
	"github.com/tally-dev/tally/store"
	"github.com/tally-dev/tally/store/hot"
)

// TestGetReadByItsAsker: a get of a partition whose worker waits for work is read by
// its asker itself, with what the worker has applied (Stats.Peeked), not handed to the
// worker's goroutine — a windowed get, a top and a standby's stale read too; while the worker is busy (here held in a checkpoint's OnFlush) a
// get is queued, and answered by the worker once it is back where it answers queries,
// with what it has applied then — never read in the middle of its work. Before, every
// get was handed to the worker's goroutine.
func TestGetReadByItsAsker(t *testing.T) {
	r := newRig(t)
	const x, y, absent, now = 42, 43, 44, 29_000_000
	r.publishWindows(1, 1, x, 3, pipeline.WindowDelta{ID: x, Minute: now, N: 3})
	r.publishWindows(1, 2, y, 2, pipeline.WindowDelta{ID: y, Minute: now - 90, N: 2})
	cfg := r.config()
	// Held in the first checkpoint past position holdPast, once set: the one of a like
	// published after it, not a late one of what came before.
	var w *counter.Worker
	var holdPast atomic.Uint64
	held, release := make(chan struct{}), make(chan struct{})
	cfg.OnFlush = func(changed int, _ time.Duration) {
		if past := holdPast.Load(); past != 0 && w.Position() > past && holdPast.CompareAndSwap(past, 0) {
			close(held)
			<-release
		}
	}
	w, _ = r.start(cfg)
	var once sync.Once
	unhold := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unhold) // before the worker's stop, should the test fail while it is held
	if got := r.likes(w, x); got != 3 {
		t.Fatalf("likes of %d: %d, want 3", x, got)
	}
	natstest.Eventually(t, 5*time.Second, "a get read by its asker", func() (bool, string) {
		before := r.stats.Peeked.Load()
		out := r.get(w, x, y, absent)
		if fmt.Sprint(out) != "[[3 0 0 0] [2 0 0 0] [0 0 0 0]]" {
			t.Fatalf("counts of %d, %d, %d: %v", x, y, absent, out)
		}
		return r.stats.Peeked.Load() == before+1, fmt.Sprint(r.stats.Peeked.Load()-before, " gets peeked")
	})
	natstest.Eventually(t, 5*time.Second, "a windowed get read by its asker", func() (bool, string) {
		before := r.stats.Peeked.Load()
		changes := [][]int64{make([]int64, len(r.fam.Fields)), make([]int64, len(r.fam.Fields))}
		if err := w.GetWindow(t.Context(), []uint64{x, y}, now-59, changes); err != nil {
			t.Fatal(err)
		}
		if changes[0][0] != 3 || changes[1][0] != 0 {
			t.Fatalf("likes of %d and %d in the last hour: %v, want 3 and 0", x, y, changes)
		}
		return r.stats.Peeked.Load() == before+1, fmt.Sprint(r.stats.Peeked.Load()-before, " gets peeked")
	})
	natstest.Eventually(t, 5*time.Second, "a top read by its asker", func() (bool, string) {
		before := r.stats.Peeked.Load()
		top, err := w.Top(t.Context(), 0, 1440, now-1439, 10)
		if err != nil || fmt.Sprint(top) != "[{42 3} {43 2}]" {
			t.Fatalf("the top of the day: %v, %v; want 42 (3 likes) and 43 (2)", top, err)
		}
		return r.stats.Peeked.Load() == before+1, fmt.Sprint(r.stats.Peeked.Load()-before, " tops peeked")
	})
	natstest.Eventually(t, 5*time.Second, "a stale read by its asker", func() (bool, string) {
		before := r.stats.Peeked.Load()
		out := [][]uint64{make([]uint64, len(r.fam.Fields))}
		behind, err := w.Stale(t.Context(), []uint64{y}, out)
		if err != nil || out[0][0] != 2 || behind.Msgs != 0 {
			t.Fatalf("a stale read of %d: %v, %v behind, %v; want 2 likes, none behind", y, out, behind, err)
		}
		return r.stats.Peeked.Load() == before+1, fmt.Sprint(r.stats.Peeked.Load()-before, " stale reads peeked")
	})

	// The worker held in the checkpoint of a like of x: a get waits for it.
	holdPast.Store(r.last)
	r.publish(1, 3, x, 1)
	<-held
	peeked, queued := r.stats.Peeked.Load(), r.stats.Queued.Load()
	out := [][]uint64{make([]uint64, len(r.fam.Fields))}
	wait := w.Send(t.Context(), []uint64{x}, out)
	answered := make(chan error, 1)
	go func() { answered <- wait() }()
	select {
	case err := <-answered:
		t.Fatalf("a get answered (%v, %v) while its worker is busy", err, out)
	case <-time.After(100 * time.Millisecond):
	}
	unhold()
	if err := <-answered; err != nil || out[0][0] != 4 {
		t.Fatalf("a get queued while its worker was busy: %v, %v; want 4 likes", err, out)
	}
	if got := r.stats.Peeked.Load(); got != peeked {
		t.Fatalf("%d gets peeked while the worker was busy", got-peeked)
	}
	if got := r.stats.Queued.Load(); got != queued+1 {
		t.Fatalf("%d gets queued while the worker was busy, want 1", got-queued)
	}
}

// TestGetsReadWhileDeltasApply: gets read by their askers on many goroutines while the
// worker applies deltas and takes checkpoints and snapshots of its table (the hot one,
// whose reads move its own cursors) see every count only grow, and the last the total;
// windowed gets and tops are read beside them (run with -race: what a read reads is
// never written meanwhile, the kept tops included).
func TestGetsReadWhileDeltasApply(t *testing.T) {
	r := newRig(t)
	cfg := r.config()
	cfg.NewTable = func(f int) store.Table { return hot.New(f) }
	cfg.SnapshotDir, cfg.SnapshotMin = t.TempDir(), 1
	w, _ := r.start(cfg)
	const ids, batches, now = 8, 300, 29_000_000
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			last := make([]uint64, ids)
			for {
				select {
				case <-done:
					return
				default:
				}
				out, err := r.tryGet(w, 100, 101, 102, 103, 104, 105, 106, 107)
				if err != nil {
					t.Error(err)
					return
				}
				changes := [][]int64{make([]int64, len(r.fam.Fields))}
				if err := w.GetWindow(t.Context(), []uint64{100}, now-59, changes); err != nil {
					t.Error(err)
					return
				}
				if _, err := w.Top(t.Context(), 0, 60, now-59, 3); err != nil {
					t.Error(err)
					return
				}
				for i := range ids {
					if out[i][0] < last[i] {
						t.Errorf("likes of %d went from %d to %d", 100+i, last[i], out[i][0])
						return
					}
					last[i] = out[i][0]
				}
			}
		})
	}
	want := map[uint64]uint64{}
	for seq := uint64(1); seq <= batches; seq++ {
		id := 100 + seq%ids
		r.publishWindows(1, seq, id, 1, pipeline.WindowDelta{ID: id, Minute: now, N: 1})
		want[id]++
	}
	for id, n := range want {
		if got := r.likes(w, id); got != n {
			t.Errorf("likes of %d: %d, want %d", id, got, n)
		}
	}
	close(done)
	wg.Wait()
	if r.stats.Peeked.Load() == 0 {
		t.Fatal("no get was read by its asker")
	}
}

// get asks w for the counts of ids and returns them; on the test's goroutine.
func (r *rig) get(w *counter.Worker, ids ...uint64) [][]uint64 {
	r.t.Helper()
	out, err := r.tryGet(w, ids...)
	if err != nil {
		r.t.Fatal(err)
	}
	return out
}

// tryGet asks w for the counts of ids; on any goroutine.
func (r *rig) tryGet(w *counter.Worker, ids ...uint64) ([][]uint64, error) {
	out := make([][]uint64, len(ids))
	for i := range out {
		out[i] = make([]uint64, len(r.fam.Fields))
	}
	return out, w.Get(context.Background(), ids, out)
}
