package node

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/natstest"
	"github.com/tally-dev/tally/stages/cluster"
	"github.com/tally-dev/tally/stages/counter"
	"github.com/tally-dev/tally/stages/query"
	"github.com/tally-dev/tally/store/checkpoint"
	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/delivery"
	"github.com/tally-dev/tally/store/graph"
	"github.com/tally-dev/tally/store/stagelog"
)

// partRig is a NATS server with the streams and state bucket, and processes that own
// partition 0 in turn, each with its own node id and Badger.
type partRig struct {
	t   *testing.T
	js  jetstream.JetStream
	obs jetstream.ObjectStore
	sj  pipeline.Subjects
}

func newPartRig(t *testing.T) *partRig {
	t.Helper()
	js, obs, sj := natstest.State(t, 2)
	return &partRig{t: t, js: js, obs: obs, sj: sj}
}

func (r *partRig) process() *Node {
	t := r.t
	t.Helper()
	cfg := DefaultConfig()
	cfg.DataDir, cfg.Partitions = t.TempDir(), 2
	log := slog.New(slog.DiscardHandler)
	o, err := cluster.Open(t.Context(), r.js, cluster.Bucket{Name: r.sj.OwnersBucket()}, cfg.DataDir, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	db, err := cold.Open(cold.Options{Dir: filepath.Join(cfg.DataDir, "state"), Logger: log, Upgrade: graph.Upgrade})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	b := &cluster.Backups{JS: r.js, Obs: r.obs, DB: db, Subjects: r.sj, Log: log, TmpDir: cfg.DataDir}
	return &Node{cfg: cfg, subjects: r.sj, log: log, js: r.js, backups: b, db: db, owners: o}
}

// take takes partition 0's lease for n, as a new owner does once the last one's expired.
func (r *partRig) take(n *Node) *cluster.Lease {
	r.t.Helper()
	kv, err := r.js.KeyValue(r.t.Context(), r.sj.OwnersBucket())
	if err != nil {
		r.t.Fatal(err)
	}
	_ = kv.Delete(r.t.Context(), counterKey(0))
	l, err := n.owners.Take(r.t.Context(), counterKey(0))
	if err != nil {
		r.t.Fatal(err)
	}
	return l
}

// owner is the last owner name's pointer records.
func (r *partRig) owner(name string) string {
	r.t.Helper()
	o, err := r.process().backups.LastOwner(r.t.Context(), name)
	if err != nil {
		r.t.Fatal(err)
	}
	return o
}

// A backup purges the stage's log below the record it covers and keeps that record: the
// next append expects it to be the subject's last.
func TestPurgeLogsKeepsLast(t *testing.T) {
	r := newPartRig(t)
	n := r.process()
	var seqs []uint64
	for i := range 3 {
		ack, err := r.js.Publish(t.Context(), r.sj.Log(0), []byte{byte(i)})
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, ack.Sequence)
	}
	if err := n.purgeLog(t.Context(), 0, seqs[2]); err != nil {
		t.Fatal(err)
	}
	st, err := r.js.Stream(t.Context(), r.sj.LogStream())
	if err != nil {
		t.Fatal(err)
	}
	last, err := st.GetLastMsgForSubject(t.Context(), r.sj.Log(0))
	if err != nil || last.Sequence != seqs[2] {
		t.Fatalf("last record after the purge: %v %v, want %d", last, err, seqs[2])
	}
	if _, err := st.GetMsg(t.Context(), seqs[1]); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("a covered record is still there: %v", err)
	}
}

// After an upgrade from one backup of every event stage ("events"), a partition's stage
// is claimed only by the process that backup names as its last owner, whose database
// holds the state: another refuses with ErrLegacyState rather than start from nothing.
func TestClaimEventsAfterUpgrade(t *testing.T) {
	r := newPartRig(t)
	a, b := r.process(), r.process()
	old, _ := json.Marshal(map[string]any{"object": "events.old", "owner": a.owners.ID(), "lease": 1}) // as the old version wrote it
	if _, err := r.js.Publish(t.Context(), r.sj.BackupPointer(legacyEvents), old); err != nil {
		t.Fatal(err)
	}
	lb := r.take(b)
	if _, err := b.claimEvents(t.Context(), 0, lb, false); !errors.Is(err, ErrLegacyState) {
		t.Fatalf("another process claimed a partition of the old backup: %v, want ErrLegacyState", err)
	}
	lb.Release(t.Context())
	la := r.take(a)
	if from, err := a.claimEvents(t.Context(), 0, la, false); err != nil || from != "local" {
		t.Fatalf("the old backup's owner claimed partition 0: %q %v, want local", from, err)
	}
	if got := r.owner(eventObject(0)); got != a.owners.ID() {
		t.Fatalf("partition 0's event state owned by %q after the claim, want %q", got, a.owners.ID())
	}
}

// A partition handed over ends the periodic backup of it under way: the hand-over waits
// for no backup but its own. It waited for the backup in flight — minutes on a loaded
// cluster with millions of ids — and the ownership round with it, so that no partition
// free meanwhile started in this process.
func TestHandOverEndsBackupInFlight(t *testing.T) {
	r := newPartRig(t)
	n := r.process()
	n.cfg.BackupEvery = 10 * time.Millisecond
	n.query = query.New(query.Config{Partitions: 2, Families: n.cfg.Families}, nil, nil, nil, n.log)
	n.parts = map[int]*owned{}
	ctx, cancel := context.WithCancel(t.Context())
	pt := &owned{p: 0, lease: r.take(n), ctx: ctx, cancel: cancel, stopWorkers: func() {}}
	n.parts[0] = pt
	inFlight := make(chan struct{})
	var first sync.Once
	n.backing = func(ctx context.Context, p int) {
		first.Do(func() { // the periodic one, slow: until it is ended
			close(inFlight)
			select {
			case <-ctx.Done():
			case <-time.After(time.Minute):
			}
		})
	}
	loop, stopLoop := context.WithCancel(t.Context())
	defer stopLoop()
	go func() { _ = n.backupLoop(loop) }()
	<-inFlight
	handed := make(chan struct{})
	go func() {
		n.stopPart(pt, leaveWarm)
		close(handed)
	}()
	select {
	case <-handed:
	case <-time.After(20 * time.Second):
		t.Fatal("the hand-over waited for the periodic backup under way")
	}
}

// Backups slower than BackupEvery are paced: a round that took t waits 3t before the next
// (backupRest), so that a standby priming from one has time to reach it before the one
// after is stored. They ran back to back, and standbys that took longer to prime than a
// round took to store never got warm.
func TestBackupsPaced(t *testing.T) {
	r := newPartRig(t)
	n := r.process()
	n.cfg.BackupEvery = 10 * time.Millisecond
	n.query = query.New(query.Config{Partitions: 2, Families: n.cfg.Families}, nil, nil, nil, n.log)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	n.parts = map[int]*owned{0: {p: 0, lease: r.take(n), ctx: ctx, cancel: cancel, stopWorkers: func() {}}}
	const slow = 200 * time.Millisecond
	var mu sync.Mutex
	var starts []time.Time
	n.backing = func(ctx context.Context, p int) {
		mu.Lock()
		starts = append(starts, time.Now())
		mu.Unlock()
		time.Sleep(slow)
	}
	loop, stopLoop := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = n.backupLoop(loop)
	}()
	time.Sleep(3 * time.Second)
	stopLoop()
	<-done
	mu.Lock()
	defer mu.Unlock()
	// 3 s of rounds of at least 200 ms, each followed by 600 ms: at most 4. Back to back
	// they were 14 or 15.
	if len(starts) < 2 || len(starts) > 4 {
		t.Fatalf("%d backup rounds in 3 s of %v each, want 2 to 4 (each followed by %d times its length)", len(starts), slow, backupRest)
	}
	for i := 1; i < len(starts); i++ {
		if gap := starts[i].Sub(starts[i-1]); gap < (backupRest+1)*slow {
			t.Fatalf("round %d began %v after the one before, which took %v: want at least %v", i, gap, slow, (backupRest+1)*slow)
		}
	}
}

// A backup's purge of the log keeps the record holding the oldest outbox entry its
// state may not have sent (stagelog.State.LogKept), however far the state's own record
// has moved on: a new owner restoring the backup reads that entry there and sends it
// again. Purged by the state's own record, a delta batch whose publish was lost before
// the backup was lost with it.
func TestBackupPurgeKeepsTheUnsentOutbox(t *testing.T) {
	r := newPartRig(t)
	n := r.process()
	ctx := t.Context()
	pt := &owned{p: 0, lease: r.take(n), ctx: ctx, cancel: func() {}, stopWorkers: func() {}}
	for _, pc := range []cluster.Piece{n.counterPiece(0), n.eventPiece(0)} {
		if _, err := n.backups.Claim(ctx, pc, pt.lease); err != nil {
			t.Fatal(err)
		}
	}
	var recs []uint64
	for i := range 6 {
		ack, err := r.js.Publish(ctx, r.sj.Log(0), []byte{byte(i)})
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, ack.Sequence)
	}
	// The state at record 3, then at record 6, each backed up; its outbox unsent from
	// an entry of record 1 all along (a publish lost).
	for _, own := range []uint64{recs[2], recs[5]} {
		st := stagelog.State{Pos: own, Log: own, N: own, Unsent: 7, UnsentLog: recs[0]}
		if err := n.db.Update(func(txn *cold.Txn) error { return stagelog.Put(txn, 0, &st) }); err != nil {
			t.Fatal(err)
		}
		if _, err := n.backupPart(ctx, pt); err != nil {
			t.Fatal(err)
		}
	}
	logs, err := r.js.Stream(ctx, r.sj.LogStream())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := logs.GetMsg(ctx, recs[0]); err != nil {
		t.Fatalf("record 1, which holds the state's oldest unsent entry, was purged: %v", err)
	}
	// Sent at last, the state needs its own record only: the next backup but one purges
	// below it.
	for range 2 {
		st := stagelog.State{Pos: recs[5] + 1, Log: recs[5], N: recs[5] + 1}
		if err := n.db.Update(func(txn *cold.Txn) error { return stagelog.Put(txn, 0, &st) }); err != nil {
			t.Fatal(err)
		}
		if _, err := n.backupPart(ctx, pt); err != nil {
			t.Fatal(err)
		}
		recs[5]++ // a state that changed, or no backup is stored
	}
	if _, err := logs.GetMsg(ctx, recs[0]); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("record 1 not purged once no state needs it: %v", err)
	}
}

// A claim that restores a counter partition from a backup drops this process's
// snapshot files of that partition as the restore begins, not once the whole start has
// succeeded: a start whose events piece then failed (its lease lost), or a process
// killed right after the restore, left files of its older state beside the restored
// keys, which the next start, this process being the pointer's owner by then, took as
// its own (the chaos runs' wrong counts of 12-01). A claim that keeps the local state
// keeps its files: they are the state's.
func TestClaimDropsSnapshotsAsItRestores(t *testing.T) {
	r := newPartRig(t)
	a, b := r.process(), r.process()
	ctx := t.Context()
	la := r.take(a)
	if _, err := a.backups.Claim(ctx, a.counterPiece(0), la); err != nil {
		t.Fatal(err)
	}
	for _, f := range a.cfg.Families {
		cp := &checkpoint.Checkpoint{Pos: 10, Marks: map[uint32]*delivery.Mark{}}
		if err := checkpoint.SaveCounters(a.db, f.Name, 0, nil, cp, checkpoint.Journal{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := a.backups.Store(ctx, a.counterPiece(0), la); err != nil {
		t.Fatal(err)
	}
	la.Release(ctx)

	dir := filepath.Join(b.cfg.DataDir, "snapshots")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func() {
		t.Helper()
		for _, f := range b.cfg.Families {
			for p := range 2 {
				if err := os.WriteFile(counter.SnapshotPath(dir, f.Name, p), []byte("b's older state"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	left := func(p int) int {
		n := 0
		for _, f := range b.cfg.Families {
			if _, err := os.Stat(counter.SnapshotPath(dir, f.Name, p)); err == nil {
				n++
			}
		}
		return n
	}
	fams := len(b.cfg.Families)
	write()
	lb := r.take(b)
	if from, err := b.backups.Claim(ctx, b.counterPiece(0), lb); err != nil || from != "backup" {
		t.Fatalf("b's claim: %q %v, want from the backup", from, err)
	}
	if n, m := left(0), left(1); n != 0 || m != fams {
		t.Fatalf("after the restore of partition 0: %d of its snapshot files left (want 0), %d of partition 1's (want %d)", n, m, fams)
	}
	// The events piece fails here, say: the start stops, and b claims again, the
	// pointer's owner now. Its keys are the state: what is beside them is kept.
	lb.Release(ctx)
	write()
	lb = r.take(b)
	if from, err := b.backups.Claim(ctx, b.counterPiece(0), lb); err != nil || from != "local" {
		t.Fatalf("b's second claim: %q %v, want local", from, err)
	}
	if n := left(0); n != fams {
		t.Fatalf("a claim of the local state dropped %d of its %d snapshot files", fams-n, fams)
	}
}
