package counter_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/stages/counter"
	"github.com/tally-dev/tally/store"
	"github.com/tally-dev/tally/store/checkpoint"
	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/cold/coldtest"
	"github.com/tally-dev/tally/store/hot"
)

// publishWindows sends batch seq of source src: a like count change n of id, and its
// window changes.
func (r *rig) publishWindows(src uint32, seq uint64, id uint64, n int64, wins ...pipeline.WindowDelta) {
	r.t.Helper()
	b := pipeline.DeltaBatch{Source: src, Seq: seq, Deltas: []pipeline.Delta{{ID: id, Op: pipeline.OpAdd, N: n}}, Windows: wins}
	r.publishRaw(src, seq, pipeline.AppendDeltaBatch(nil, &b))
}

// windowLikes waits until w applied everything published and returns the like change of
// each id since minute since.
func (r *rig) windowLikes(w *counter.Worker, since uint32, ids ...uint64) []int64 {
	r.t.Helper()
	r.likes(w, ids[0]) // waits for every delta
	out := make([][]int64, len(ids))
	for i := range out {
		out[i] = make([]int64, len(r.fam.Fields))
	}
	if err := w.GetWindow(context.Background(), ids, since, out); err != nil {
		r.t.Fatal(err)
	}
	got := make([]int64, len(ids))
	for i := range out {
		got[i] = out[i][0]
	}
	return got
}

// TestWindowsSurviveRestart: a worker keeps the changes by minute it applied — each
// batch once, in its source's order, whatever was sent again — writes them with its
// checkpoints, and a worker started afresh on the same Badger answers the same windows.
// Past a day from the newest minute applied, a change is forgotten, in RAM and on disk.
func TestWindowsSurviveRestart(t *testing.T) {
	r := newRig(t)
	const now = 29_000_000
	at := func(id uint64, minute uint32, n int64) pipeline.WindowDelta {
		return pipeline.WindowDelta{ID: id, Minute: minute, N: n}
	}
	w, stop := r.start(r.config())
	r.publishWindows(1, 1, 42, 1, at(42, now-70, 1))
	r.publishWindows(1, 2, 42, 1, at(42, now-30, 1))
	r.publishWindows(1, 2, 42, 1, at(42, now-30, 1)) // sent again: skipped
	r.publishWindows(1, 4, 42, -1, at(42, now, -1))  // above a gap: held until 3 comes
	r.publishWindows(1, 3, 42, 2, at(42, now-3, 2), at(43, now-4, 1))
	r.publishWindows(2, 1, 43, 1, at(43, now-5, 1)) // just outside 5 minutes
	check := func(w *counter.Worker, when string) {
		t.Helper()
		for _, c := range []struct {
			since uint32
			want  string
		}{{now - 4, "[1 1]"}, {now - 59, "[2 2]"}, {now - 1439, "[3 2]"}} {
			if got := fmt.Sprint(r.windowLikes(w, c.since, 42, 43)); got != c.want {
				t.Fatalf("%s: since %d: got %s, want %s", when, c.since, got, c.want)
			}
		}
	}
	check(w, "applied")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	w, stop = r.start(r.config())
	check(w, "restarted")

	// A change a day after now-4 moves the day on: what is older is forgotten, and
	// 43's record, with nothing left, is deleted from Badger.
	r.publishWindows(1, 5, 44, 1, at(44, now-4+pipeline.WindowDay, 1))
	if got := fmt.Sprint(r.windowLikes(w, 0, 42, 43, 44)); got != "[1 0 1]" {
		t.Fatalf("a day on: got %s, want [1 0 1]", got)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	w, _ = r.start(r.config())
	if got := fmt.Sprint(r.windowLikes(w, 0, 42, 43, 44)); got != "[1 0 1]" {
		t.Fatalf("a day on, restarted: got %s, want [1 0 1]", got)
	}
	stored := map[uint64]bool{}
	if err := checkpoint.LoadWindows(r.db, r.fam.Name, 0, func(id uint64, _ []byte) error { stored[id] = true; return nil }); err != nil {
		t.Fatal(err)
	}
	if stored[43] || !stored[42] || !stored[44] {
		t.Fatalf("stored window records %v, want 42 and 44 (43's forgotten)", stored)
	}
}

// TestWindowsOfStandbyAndBackup: a standby's worker, applying the same batches on a
// database of its own, answers the owner's windows once promoted; and a backup of the
// owner's counter partition, restored into another database, starts a worker that
// answers them too (a hand-over by restore).
func TestWindowsOfStandbyAndBackup(t *testing.T) {
	r := newRig(t)
	const now = 29_000_000
	at := func(id uint64, minute uint32, n int64) pipeline.WindowDelta {
		return pipeline.WindowDelta{ID: id, Minute: minute, N: n}
	}
	owner, stopOwner := r.start(r.config())
	standbyDB := coldtest.Open(t, cold.Options{})
	promoted := new(atomic.Bool)
	cfg := r.config()
	cfg.Valid = promoted.Load
	standby, _ := r.startOn(standbyDB, cfg)
	r.publishWindows(1, 1, 42, 1, at(42, now-70, 1))
	r.publishWindows(1, 3, 42, -1, at(42, now, -1)) // above a gap
	r.publishWindows(1, 2, 42, 2, at(42, now-3, 2), at(43, now-4, 1))
	r.publishWindows(1, 2, 42, 2, at(42, now-3, 2), at(43, now-4, 1)) // sent again
	const want = "[1 1]"                                              // since now-4: 42 +2 -1, 43 +1
	if got := fmt.Sprint(r.windowLikes(owner, now-4, 42, 43)); got != want {
		t.Fatalf("owner: got %s, want %s", got, want)
	}
	if err := stopOwner(); err != nil {
		t.Fatal(err)
	}
	var backup bytes.Buffer
	if err := r.db.Backup(&backup, cold.CounterKeys([]string{r.fam.Name}, 0)); err != nil {
		t.Fatal(err)
	}
	promoted.Store(true)
	if got := fmt.Sprint(r.windowLikes(standby, now-4, 42, 43)); got != want {
		t.Fatalf("promoted standby: got %s, want %s", got, want)
	}
	restored := coldtest.Open(t, cold.Options{})
	if err := restored.Restore(&backup, cold.CounterKeys([]string{r.fam.Name}, 0), t.TempDir()); err != nil {
		t.Fatal(err)
	}
	w, _ := r.startOn(restored, r.config())
	if got := fmt.Sprint(r.windowLikes(w, now-4, 42, 43)); got != want {
		t.Fatalf("restored from a backup: got %s, want %s", got, want)
	}
}

// TestTopKept: a top asked is ranked at once over the minutes asked, then kept and ranked
// again at each flush tick, so that changes applied since reach it within a tick; a top
// over other minutes is ranked when asked.
func TestTopKept(t *testing.T) {
	r := newRig(t)
	now := pipeline.WindowSince(time.Now(), 1) // the current minute: the worker's ticks rank over it
	at := func(id uint64, n int64) pipeline.WindowDelta { return pipeline.WindowDelta{ID: id, Minute: now, N: n} }
	w, _ := r.start(r.config())
	r.publishWindows(1, 1, 42, 2, at(42, 2))
	r.publishWindows(1, 2, 43, 1, at(43, 1))
	r.likes(w, 42) // applied
	since := pipeline.WindowSince(time.Now(), 60)
	top := func(since uint32) string {
		t.Helper()
		ranked, err := w.Top(context.Background(), 0, 60, since, 10)
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(ranked)
	}
	if got := top(since); got != "[{42 2} {43 1}]" {
		t.Fatalf("first asked: %s", got)
	}
	r.publishWindows(1, 3, 43, 5, at(43, 5))
	r.likes(w, 43)
	deadline := time.Now().Add(10 * time.Second)
	for top(pipeline.WindowSince(time.Now(), 60)) != "[{43 6} {42 2}]" {
		if time.Now().After(deadline) {
			t.Fatalf("the kept top never ranked the change since: %s", top(since))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := top(now + 1); got != "[]" { // minutes past everything applied
		t.Fatalf("a top over other minutes: %s, want none ranked", got)
	}
}

// checkpointedWindows runs a worker that applies batch 1 of source 1 — n likes of id at
// minute — and stops it, so that its checkpoint stores them.
func (r *rig) checkpointedWindows(id uint64, n int64, minute uint32) {
	r.t.Helper()
	w, stop := r.start(r.config())
	r.publishWindows(1, 1, id, n, pipeline.WindowDelta{ID: id, Minute: minute, N: n})
	if got := r.likes(w, id); got != uint64(n) {
		r.t.Fatalf("likes of %d: %d, want %d", id, got, n)
	}
	if err := stop(); err != nil {
		r.t.Fatal(err)
	}
}

// storedLikes is the likes of id the partition's checkpoints stored.
func (r *rig) storedLikes(id uint64) uint64 {
	r.t.Helper()
	out := [][]uint64{make([]uint64, len(r.fam.Fields))}
	if err := checkpoint.Counts(r.db, r.fam.Name, 0, []uint64{id}, out); err != nil {
		r.t.Fatal(err)
	}
	return out[0][0]
}

// TestWindowedIDOneKey: a checkpoint stores an id whose counters and windows changed
// under one key — its counters with its record — where it wrote two (layout 5: the
// counter key and the record's key), and a worker started afresh reads both back.
func TestWindowedIDOneKey(t *testing.T) {
	r := newRig(t)
	const now = 29_000_000
	r.checkpointedWindows(42, 3, now)
	id := binary.BigEndian.AppendUint64(nil, 42)
	var of42 []string
	for k := range coldtest.All(t, r.db) {
		if (k[0] == 'c' || k[0] == 'w') && strings.HasSuffix(k, string(id)) {
			of42 = append(of42, fmt.Sprintf("%q", k))
		}
	}
	if len(of42) != 1 {
		t.Fatalf("id 42 stored under %d keys, want 1: %v", len(of42), of42)
	}
	w, _ := r.start(r.config())
	if got := fmt.Sprint(r.windowLikes(w, now-4, 42), r.likes(w, 42)); got != "[3] 3" {
		t.Fatalf("restarted: window and likes %s, want [3] 3", got)
	}
}

// TestForgottenRecordsMoveBack: when a day passes, the ids whose windows it forgot have
// their counters moved back to their counter keys, maxGone a checkpoint; an id among
// those still to move whose counters change meanwhile is written there at once, never
// left to its record's stale copy; and the cold tier reads every id's counters right
// after each step.
func TestForgottenRecordsMoveBack(t *testing.T) {
	r := newRig(t)
	const now, n = 29_000_000, 5000
	cfg := r.config()
	cfg.FlushInterval = time.Hour // a checkpoint at each stop only
	w, stop := r.start(cfg)
	b := pipeline.DeltaBatch{Source: 1, Seq: 1}
	for id := uint64(1); id <= n; id++ {
		b.Deltas = append(b.Deltas, pipeline.Delta{ID: id, Op: pipeline.OpAdd, N: 1})
		b.Windows = append(b.Windows, pipeline.WindowDelta{ID: id, Minute: now, N: 1})
	}
	r.publishRaw(1, 1, pipeline.AppendDeltaBatch(nil, &b))
	// A day on: every record above is forgotten at the next checkpoint, and 4990 — past
	// the first maxGone to move — changes in the same batch.
	b = pipeline.DeltaBatch{Source: 1, Seq: 2,
		Deltas:  []pipeline.Delta{{ID: 9999, Op: pipeline.OpAdd, N: 1}, {ID: 4990, Op: pipeline.OpAdd, N: 5}},
		Windows: []pipeline.WindowDelta{{ID: 9999, Minute: now + pipeline.WindowDay + 20, N: 1}}}
	r.publishRaw(1, 2, pipeline.AppendDeltaBatch(nil, &b))
	if got := r.likes(w, 4990); got != 6 {
		t.Fatalf("likes of 4990: %d, want 6", got)
	}
	check := func(when string) {
		t.Helper()
		ids := make([]uint64, 0, n+1)
		out := make([][]uint64, 0, n+1)
		for id := uint64(1); id <= n; id++ {
			ids, out = append(ids, id), append(out, make([]uint64, len(r.fam.Fields)))
		}
		ids, out = append(ids, 9999), append(out, make([]uint64, len(r.fam.Fields)))
		if err := checkpoint.Counts(r.db, r.fam.Name, 0, ids, out); err != nil {
			t.Fatal(err)
		}
		for i, id := range ids {
			want := uint64(1)
			if id == 4990 {
				want = 6
			}
			if out[i][0] != want {
				t.Fatalf("%s: stored likes of %d: %d, want %d", when, id, out[i][0], want)
			}
		}
	}
	records := func() int {
		t.Helper()
		n := 0
		if err := checkpoint.LoadWindows(r.db, r.fam.Name, 0, func(uint64, []byte) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if err := stop(); err != nil { // one checkpoint: the first maxGone records move back
		t.Fatal(err)
	}
	check("after the first checkpoint")
	if got := records(); got <= 1 || got >= n-4096+2 {
		t.Fatalf("%d records stored after one checkpoint, want %d–%d (9999's and those still to move)", got, 2, n-4096+1)
	}
	w, stop = r.start(cfg)
	if got := r.likes(w, 4990); got != 6 {
		t.Fatalf("restarted: likes of 4990: %d, want 6", got)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	check("after the second")
	if got := records(); got != 1 {
		t.Fatalf("%d records stored, want 1 (9999's)", got)
	}
}

// TestWindowOnlyChangeKeepsCounts: a batch that changes an id's windows and not its
// counters (a like and its unlike a minute apart, coalesced) stores the id's record
// with the counters it had.
func TestWindowOnlyChangeKeepsCounts(t *testing.T) {
	r := newRig(t)
	const now = 29_000_000
	r.checkpointedWindows(50, 2, now)
	w, stop := r.start(r.config())
	b := pipeline.DeltaBatch{Source: 1, Seq: 2, Windows: []pipeline.WindowDelta{{ID: 50, Minute: now + 1, N: 1}, {ID: 50, Minute: now + 2, N: -1}}}
	r.publishRaw(1, 2, pipeline.AppendDeltaBatch(nil, &b))
	if got := fmt.Sprint(r.windowLikes(w, now+1, 50), r.likes(w, 50)); got != "[0] 2" {
		t.Fatalf("window since the unlike's minute and likes: %s, want [0] 2", got)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := r.storedLikes(50); got != 2 {
		t.Fatalf("stored likes of 50: %d, want 2", got)
	}
	w, _ = r.start(r.config())
	if got := fmt.Sprint(r.windowLikes(w, now-4, 50)); got != "[2]" {
		t.Fatalf("restarted: window %s, want [2]", got)
	}
}

// TestColdWindowedIDReadWithItsRecord: an id past the cold age, whose counters live in
// Badger and not in RAM, is read with its record when it has one — over the stale copy
// its counter key keeps — by a query and by a checkpoint that stores a change of its
// windows alone.
func TestColdWindowedIDReadWithItsRecord(t *testing.T) {
	r := newRig(t)
	const now = 29_000_000
	cfg := r.config()
	cfg.FlushInterval = time.Hour // checkpoints at the stops alone
	cfg.NewTable = func(f int) store.Table { return hot.New(f) }
	cfg.ColdAge = time.Hour
	x := uint64(1) << 40 // a snowflake of 2010: past the cold age
	for seq, publish := range []func(){
		func() { r.publish(1, 1, x, 1) }, // its counter key: 1
		func() { r.publishWindows(1, 2, x, 2, pipeline.WindowDelta{ID: x, Minute: now, N: 2}) }, // with its record: 3
	} {
		w, stop := r.start(cfg)
		publish()
		if got := r.likes(w, x); got != uint64(1+2*seq) {
			t.Fatalf("likes %d, want %d", got, 1+2*seq)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	}
	reads := r.stats.ColdReads.Load()
	w, stop := r.start(cfg)
	if got := r.likes(w, x); got != 3 {
		t.Fatalf("a query of the cold id: %d likes, want 3", got)
	}
	b := pipeline.DeltaBatch{Source: 1, Seq: 3, Windows: []pipeline.WindowDelta{{ID: x, Minute: now + 1, N: 1}, {ID: x, Minute: now + 2, N: -1}}}
	r.publishRaw(1, 3, pipeline.AppendDeltaBatch(nil, &b))
	if got := fmt.Sprint(r.windowLikes(w, now-4, x)); got != "[2]" {
		t.Fatalf("window %s, want [2]", got)
	}
	if err := stop(); err != nil { // a checkpoint of the change of its windows alone
		t.Fatal(err)
	}
	if r.stats.ColdReads.Load() == reads {
		t.Fatal("the id was never read from the cold tier")
	}
	if got := r.storedLikes(x); got != 3 {
		t.Fatalf("stored likes of the cold id %d, want 3", got)
	}
}

// TestColdHitsCountedOnce: a delta of a cold id the cold cache holds is one hit, though
// the batch's prefetch looks for it before warm takes it (tally_cold_cache_hits_total).
// Before, prefetch counted its look too: every cached id a delta changed, two hits.
func TestColdHitsCountedOnce(t *testing.T) {
	r := newRig(t)
	cfg := r.config()
	cfg.FlushInterval = time.Hour // checkpoints at the stops alone
	cfg.NewTable = func(f int) store.Table { return hot.New(f) }
	cfg.ColdAge, cfg.ColdCache = time.Hour, 1024
	ids := []uint64{1 << 40, 1<<40 + 1, 1<<40 + 2} // snowflakes of 2010: past the cold age
	w, stop := r.start(cfg)
	for i, x := range ids {
		r.publish(1, uint64(i+1), x, 1)
	}
	r.likes(w, ids[0])
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	w, stop = r.start(cfg) // the ids cold now: in Badger, not in the table
	defer stop()
	out := make([][]uint64, len(ids))
	for i := range out {
		out[i] = make([]uint64, len(r.fam.Fields))
	}
	r.likes(w, ids[0])                                            // started and caught up
	if err := w.Get(context.Background(), ids, out); err != nil { // read from Badger and cached
		t.Fatal(err)
	}
	hits := r.stats.ColdHits.Load()
	b := pipeline.DeltaBatch{Source: 1, Seq: 4}
	for _, x := range ids {
		b.Deltas = append(b.Deltas, pipeline.Delta{ID: x, Field: 0, Op: pipeline.OpAdd, N: 1})
	}
	r.publishRaw(1, 4, pipeline.AppendDeltaBatch(nil, &b))
	for _, x := range ids {
		if got := r.likes(w, x); got != 2 {
			t.Fatalf("likes of %d: %d, want 2", x, got)
		}
	}
	if got := r.stats.ColdHits.Load() - hits; got != int64(len(ids)) {
		t.Fatalf("%d cold-cache hits for %d cached ids changed once each, want %d", got, len(ids), len(ids))
	}
}
