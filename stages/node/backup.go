package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/store/cold"
)

// The state backup and the id of the last owner, in the object store.
const (
	backupObject = "state"
	ownerObject  = "owner"
)

// own takes the ownership lease, waiting for it as a standby if so configured, and, when
// the last backup in NATS was written by another owner (or this data directory has no
// state), restores it: the state a new owner starts from is its predecessor's last
// backup, which its event stages then bring up to the predecessor's last transaction by
// replaying their logs (see event.Config.Log).
func (n *Node) own(ctx context.Context, js jetstream.JetStream, sj pipeline.Subjects, replicas int) error {
	cfg := n.cfg
	for waited := false; ; waited = true {
		l, err := acquireLease(ctx, js, sj.OwnersBucket(), replicas, cfg.DataDir, cfg.LeaseTTL)
		if err == nil {
			n.lease = l
			if waited {
				n.log.Info("standby took the partitions over")
			}
			break
		}
		if !errors.Is(err, ErrOwned) || !cfg.Standby {
			return err
		}
		if !waited {
			n.log.Info("standby: waiting for the owner's lease", "err", err)
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(cfg.LeaseTTL / 10):
		}
	}
	if cfg.BackupEvery <= 0 {
		return nil
	}
	obs, err := js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: sj.StateBucket(), Replicas: replicas,
		Description: "Tally state backups: what a new owner of the partitions starts from"})
	if err != nil {
		return fmt.Errorf("cannot set up the state bucket %s: %w", sj.StateBucket(), err)
	}
	n.obs = obs
	// Local state is trusted only if this directory was the last owner: anything else —
	// another process owned the partitions since — starts from the last backup, or from
	// nothing if there is none, and replays the streams.
	last, err := obs.GetString(ctx, ownerObject)
	if err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return fmt.Errorf("cannot read the last owner: %w", err)
	}
	if _, err := obs.PutString(ctx, ownerObject, n.lease.id); err != nil {
		return fmt.Errorf("cannot record the owner: %w", err)
	}
	stateDir := filepath.Join(cfg.DataDir, "state")
	_, statErr := os.Stat(stateDir)
	if last == n.lease.id && statErr == nil || last == "" {
		return nil
	}
	start := time.Now()
	// Snapshots of the hot tables are this directory's own, not the restored state's.
	if err := os.RemoveAll(filepath.Join(cfg.DataDir, "snapshots")); err != nil {
		return err
	}
	obj, err := obs.Get(ctx, backupObject)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		n.log.Warn("taking over without a backup: replaying the streams from the start", "last owner", last)
		n.takeover = "empty"
		return os.RemoveAll(stateDir)
	}
	if err != nil {
		return fmt.Errorf("cannot fetch the state backup: %w", err)
	}
	defer obj.Close()
	if err := cold.Restore(stateDir, obj, n.log); err != nil {
		return err
	}
	n.takeover = "backup"
	info, _ := obj.Info()
	if info != nil {
		n.log.Info("restored the previous owner's state", "owner", info.Metadata["owner"], "bytes", info.Size, "took", time.Since(start))
	}
	return nil
}

// backups stores a backup of the state every BackupEvery while the lease is certainly
// held, then lets each counter partition purge the deltas the backup covers.
func (n *Node) backups(ctx context.Context) error {
	tick := time.NewTicker(n.cfg.BackupEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if err := n.backup(ctx); err != nil && ctx.Err() == nil {
			n.BackupErrs.Add(1)
			n.log.Warn("cannot back the state up to NATS; deltas are kept until a backup succeeds", "err", err)
		}
	}
}

func (n *Node) backup(ctx context.Context) error {
	if !n.lease.valid() {
		return errors.New("the ownership lease is not certainly held")
	}
	// Positions read before the backup starts are covered by it.
	limits := make([]uint64, len(n.workers))
	for i, w := range n.workers {
		fam, p := w.Partition()
		cp, err := cold.LoadCheckpoint(n.db, fam, p)
		if err != nil {
			return err
		}
		limits[i] = cp.Pos
	}
	logs := make([]uint64, n.cfg.Partitions)
	for p := range logs {
		st, _, err := cold.LoadStage(n.db, p)
		if err != nil {
			return err
		}
		logs[p] = st.Log
	}
	start := time.Now()
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(n.db.Backup(pw)) }()
	info, err := n.obs.Put(ctx, jetstream.ObjectMeta{Name: backupObject,
		Metadata: map[string]string{"owner": n.lease.id, "lease": fmt.Sprint(n.lease.acquired)}}, pr)
	pr.CloseWithError(err)
	if err != nil {
		return err
	}
	for i, w := range n.workers {
		w.SetPurgeLimit(limits[i])
	}
	if err := n.purgeLogs(ctx, logs); err != nil {
		n.log.Warn("cannot purge the event-stage logs a backup covers", "err", err)
	}
	level := slog.LevelDebug
	if n.Backups.Add(1) == 1 {
		level = slog.LevelInfo
	}
	n.log.Log(ctx, level, "state backed up to NATS", "bytes", info.Size, "took", time.Since(start))
	return nil
}

// purgeLogs drops each event-stage log's records below the last one a stored backup
// covers: a new owner replays only the records after it. The covered record itself stays,
// the subject's last sequence that the next append expects.
func (n *Node) purgeLogs(ctx context.Context, logs []uint64) error {
	sj := n.cfg.streams().Subjects
	st, err := n.js.Stream(ctx, sj.LogStream())
	if err != nil {
		return err
	}
	for p, seq := range logs {
		if seq <= 1 {
			continue
		}
		if err := st.Purge(ctx, jetstream.WithPurgeSubject(sj.Log(p)), jetstream.WithPurgeSequence(seq)); err != nil {
			return err
		}
	}
	return nil
}

// Takeover tells how this process started when another had owned the partitions: from
// its "backup" restored from NATS, or "empty" (no backup; the streams replayed), or ""
// when it did not take over.
func (n *Node) Takeover() string { return n.takeover }
