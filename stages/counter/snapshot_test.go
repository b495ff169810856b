package counter_test

import (
	"bytes"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/tally-dev/tally/pipeline/natstest"
	"github.com/tally-dev/tally/stages/counter"
	"github.com/tally-dev/tally/store"
	"github.com/tally-dev/tally/store/checkpoint"
	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/cold/coldtest"
	"github.com/tally-dev/tally/store/hot"
)

// A snapshot file is loaded only with the state it was taken of. A process's snapshot
// directory outlives the state beside it in Badger: a restore, a standby primed, a
// claim brings another process's state of the partition, whose checkpoints are numbered
// like this one's. Before, the file was taken on its checkpoint number alone: a file of
// checkpoint 1 here, loaded with another lineage's checkpoint 1, gave the table this
// process's counts with the other's marks — deltas counted twice or never, for good
// (TestChaosCluster at 100 cycles ended with one partition's counts one or two off).
func TestSnapshotOfAnotherStateNotLoaded(t *testing.T) {
	r := newRig(t)
	cfg := r.config()
	cfg.FlushInterval = time.Hour // checkpoints at the stops alone
	cfg.NewTable = func(f int) store.Table { return hot.New(f) }
	cfg.SnapshotDir = t.TempDir()
	ms := uint64(time.Now().UnixMilli())
	x, y := ms<<22, (ms+1)<<22 // recent snowflake ids: hot, never read from the cold tier

	// This process: x liked, a checkpoint and its snapshot at the stop.
	r.publish(1, 1, x, 1)
	w, stop := r.start(cfg)
	if got := r.likes(w, x); got != 1 {
		t.Fatalf("likes of x: %d, want 1", got)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// Its own state again: the snapshot is taken.
	w, stop = r.start(cfg)
	if got := r.likes(w, x); got != 1 {
		t.Fatalf("likes of x after a restart: %d, want 1", got)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := r.stats.Restored.Load(); got != 1 {
		t.Fatalf("%d loads from a snapshot, want 1: a worker's own snapshot must be taken", got)
	}

	// Another process of the same partition, from its start: x and y liked.
	r.publish(1, 2, y, 1)
	other := coldtest.Open(t, cold.Options{})
	ocfg := cfg
	ocfg.SnapshotDir = t.TempDir()
	ow, ostop := r.startOn(other, ocfg)
	if got := r.likes(ow, y); got != 1 {
		t.Fatalf("likes of y in the other state: %d, want 1", got)
	}
	if err := ostop(); err != nil {
		t.Fatal(err)
	}
	// Its state brought here, as a restore does; this process's snapshot stays.
	r.copyState(other, r.db)
	restored := r.stats.Restored.Load()
	w, _ = r.start(cfg)
	if got := r.likes(w, y); got != 1 {
		t.Fatalf("likes of y after the other state was restored: %d, want 1 (the snapshot of this process's older state was loaded with it)", got)
	}
	if got := r.likes(w, x); got != 1 {
		t.Fatalf("likes of x after the other state was restored: %d, want 1", got)
	}
	if got := r.stats.Restored.Load(); got != restored {
		t.Fatalf("the table was loaded from a snapshot of another state")
	}
}

// A snapshot is named as being written by the checkpoint it is taken at, before its
// file is there: a process killed once the file is whole, before the checkpoint that
// records it as durable, still loads it. Here that moment is copied — the partition's
// keys and the file, written and not yet recorded as durable — and started elsewhere.
func TestSnapshotBeingRecordedIsLoaded(t *testing.T) {
	r := newRig(t)
	cfg := r.config()
	cfg.NewTable = func(f int) store.Table { return hot.New(f) }
	cfg.SnapshotDir = t.TempDir()
	written, release := make(chan struct{}), make(chan struct{})
	first := true
	cfg.OnSnapshot = func(int, time.Duration) { // on the writer's goroutine, once the file is whole
		if first {
			first = false
			close(written)
			<-release
		}
	}
	ms := uint64(time.Now().UnixMilli())
	x, y := ms<<22, (ms+1)<<22
	r.publish(1, 1, x, 1)
	w, _ := r.start(cfg)
	defer close(release)
	<-written // the snapshot of the first checkpoint, which a full load asks for
	r.publish(1, 2, y, 1)
	if got := r.likes(w, y); got != 1 {
		t.Fatalf("likes of y: %d, want 1", got)
	}
	var cp checkpoint.Checkpoint
	natstest.Eventually(t, 5*time.Second, "a checkpoint naming the snapshot being written", func() (bool, string) {
		var err error
		cp, err = checkpoint.LoadCheckpoint(r.db, r.fam.Name, 0)
		return err == nil && cp.Writing != 0 && cp.Pos >= r.last, fmt.Sprintf("%+v %v", cp, err)
	})
	if cp.Snap == cp.Writing {
		t.Fatalf("checkpoint %+v: the snapshot is recorded as durable already", cp)
	}

	// The moment copied: the keys and the file.
	other := coldtest.Open(t, cold.Options{})
	r.copyState(r.db, other)
	snap, err := os.ReadFile(counter.SnapshotPath(cfg.SnapshotDir, r.fam.Name, 0))
	if err != nil {
		t.Fatal(err)
	}
	ocfg := cfg
	ocfg.SnapshotDir, ocfg.OnSnapshot = t.TempDir(), nil
	if err := os.WriteFile(counter.SnapshotPath(ocfg.SnapshotDir, r.fam.Name, 0), snap, 0o644); err != nil {
		t.Fatal(err)
	}
	restored := r.stats.Restored.Load()
	ow, _ := r.startOn(other, ocfg)
	if got := r.likes(ow, x); got != 1 {
		t.Fatalf("likes of x: %d, want 1", got)
	}
	if got := r.likes(ow, y); got != 1 {
		t.Fatalf("likes of y: %d, want 1", got)
	}
	if got := r.stats.Restored.Load(); got != restored+1 {
		t.Fatalf("%d loads from a snapshot, want 1: the snapshot the checkpoint names as being written was not loaded", got-restored)
	}
}

// copyState replaces the partition's keys in to with those of from, as a restore of a
// backup does.
func (r *rig) copyState(from, to *cold.DB) {
	r.t.Helper()
	var buf bytes.Buffer
	ks := cold.CounterKeys([]string{r.fam.Name}, 0)
	if err := from.Backup(&buf, ks); err != nil {
		r.t.Fatal(err)
	}
	if err := to.Restore(&buf, ks, r.t.TempDir()); err != nil {
		r.t.Fatal(err)
	}
}
