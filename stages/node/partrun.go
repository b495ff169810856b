package node

// One partition's life in this process: started once its lease is taken (its state
// brought here, its counter workers and event stage run), stopped as it is let go, handed
// over or lost.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/tally-dev/tally/stages/counter"
)

// startPart takes partition p's lease (ErrOwned when another process holds it), brings
// its state here unless this process was its last owner, and starts a counter worker per
// family and its event stage.
func (n *Node) startPart(ctx context.Context, p int) error {
	l, err := n.owners.Take(ctx, counterKey(p))
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.claiming[p] = l // renewed while the state comes here (see renew)
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		delete(n.claiming, p)
		n.mu.Unlock()
	}()
	if n.cfg.startHook != nil {
		n.cfg.startHook(ctx, p)
	}
	pt, begun := &owned{p: p, lease: l}, time.Now()
	sb, evWarm := n.warmStandby(ctx, p)
	unwarmed := false // sb's workers stopped: the claim restored over its copy
	from, evFrom := "local", "local"
	if n.backups != nil {
		// The two pieces are restored side by side: their keys and pointers are apart.
		var cerr, eerr error
		var wg sync.WaitGroup
		cpc := n.counterPiece(p)
		cpc.Warm = sb != nil
		if sb != nil {
			// A backup stored since the standby was found warm (an old owner's, before
			// the claim fenced it) is restored over its keys: its workers stop first,
			// and fresh ones load what was restored. Taken on, their tables would hold
			// counts the restored marks do not, and apply those deltas again.
			cpc.Unwarm = func() { sb.stopWorkers(); unwarmed = true }
		}
		wg.Go(func() { from, cerr = n.backups.Claim(ctx, cpc, l) })
		wg.Go(func() { evFrom, eerr = n.claimEvents(ctx, p, l, evWarm) })
		wg.Wait()
		if err := errors.Join(cerr, eerr); err != nil {
			if sb != nil {
				sb.stop()
			}
			l.Release(ctx)
			return fmt.Errorf("partition %d: %w", p, err)
		}
		if unwarmed {
			sb = nil
		}
	}
	pt.ctx, pt.cancel = context.WithCancel(n.runCtx)
	if sb != nil { // its workers, which have applied what the last owner had, are ours now
		sb.lease.Store(l)
		pt.workers = sb.workers
		pt.stopWorkers = sb.workersCancel
		pt.wg.Go(sb.workersWG.Wait)
	} else {
		var wctx context.Context
		wctx, pt.stopWorkers = context.WithCancel(n.runCtx)
		pt.workers = n.runWorkers(wctx, p, l.Valid, &pt.wg, n.fail)
	}
	if err := n.startStage(pt.ctx, pt); err != nil {
		pt.halt()
		l.Release(ctx)
		return fmt.Errorf("partition %d: %w", p, err)
	}
	n.mu.Lock()
	n.parts[p] = pt
	n.mu.Unlock()
	n.lastStart.Store(time.Now().UnixNano())
	if n.cfg.registerHook != nil {
		n.cfg.registerHook(n, pt)
	}
	// Registered only while not stopped: a stop that came first (the stage fenced at its
	// first write) would otherwise leave the partition served here for good by workers
	// and a stage that have stopped, answering from this process's copy of its state.
	pt.reg.Lock()
	if pt.stopped {
		pt.reg.Unlock()
		n.mu.Lock()
		n.unlist(pt)
		n.mu.Unlock()
		if sb != nil {
			sb.stopServing()
		}
		return fmt.Errorf("partition %d: stopped as it started: %w", p, ErrOwned)
	}
	for i, fam := range n.cfg.Families {
		n.query.SetOwner(fam.Name, p, pt.workers[i])
	}
	if sb != nil { // its reads were served as a standby's until the owner's were
		sb.stopServing()
	}
	n.query.SetStage(p, pt.stage)
	pt.reg.Unlock()
	switch from {
	case "local":
	case "standby":
		n.PartsWarm.Add(1)
	default:
		n.PartsRestored.Add(1)
	}
	if evFrom != "local" {
		n.takeover.Store(evFrom)
	}
	n.log.Debug("partition started", "partition", p, "counters", from, "events", evFrom, "took", time.Since(begun))
	return nil
}

// runWorkers starts a counter worker of partition p for each family on wg, which answer
// for the partition while valid says so; a worker that fails is given to failed.
func (n *Node) runWorkers(ctx context.Context, p int, valid func() bool, wg *sync.WaitGroup, failed func(error)) []*counter.Worker {
	cc := n.counterConfig()
	cc.Valid = valid
	var ws []*counter.Worker
	for i, fam := range n.cfg.Families {
		cc.Family, cc.Partition = fam, p
		cc.Publisher = n.cfg.publisher(n.js, uint64(1+p*len(n.cfg.Families)+i))
		if n.cfg.ChangePublisher != nil {
			cc.Publisher = n.cfg.ChangePublisher(fam.Name, p, cc.Publisher)
		}
		w := counter.New(cc, n.readJS, n.db, n.log, &n.CounterStats)
		ws = append(ws, w)
		wg.Go(func() {
			if err := w.Run(ctx); err != nil && ctx.Err() == nil {
				failed(err)
			}
		})
	}
	return ws
}

// dropSnapshots removes partition p's counter snapshots, before a restore replaces the
// state they are of (the counter piece's Replacing).
func (n *Node) dropSnapshots(p int) {
	for _, f := range n.cfg.Families {
		_ = os.Remove(counter.SnapshotPath(filepath.Join(n.cfg.DataDir, "snapshots"), f.Name, p))
	}
}

// leave says how a partition stops here.
type leave int

func (l leave) String() string {
	switch l {
	case leaveLost:
		return "lost"
	case leaveCold:
		return "cold"
	case leaveWarm:
		return "warm"
	}
	return strconv.Itoa(int(l))
}

const (
	// leaveLost: its lease is gone, another may own it already: nothing more is written.
	leaveLost leave = iota
	// leaveCold: handed to a process that restores it: backed up, then released.
	leaveCold
	// leaveWarm: handed to a warm standby, which has followed it and replays the last
	// records after it: released as soon as it has stopped, so that the standby takes
	// it over within a moment.
	leaveWarm
)

// halt stops pt's stage and workers at once and waits for them.
func (pt *owned) halt() {
	pt.cancel()
	pt.stopWorkers()
	pt.stageWG.Wait()
	pt.wg.Wait()
}

// unlist takes pt out of the partitions held here, unless a newer start of its partition
// is there instead. Under mu.
func (n *Node) unlist(pt *owned) {
	if n.parts[pt.p] == pt {
		delete(n.parts, pt.p)
	}
}

// stopPart stops partition pt's event stage and workers (each checkpoints what it holds)
// and, handing it over, releases its lease so that its next owner starts from here,
// backing it up first unless that owner is a warm standby. pt may still be starting
// (startPart then lets it go), and may have been stopped already (nothing more is done).
//
// Handed over, the partition is served here until its workers have stopped: the stage
// stops first, and the workers apply what it published last and checkpoint, answering
// reads meanwhile. A stop took up to 9 s under load with 10 M ids (each part's last
// checkpoint and snapshot) and the partition, taken off the query path as the stop
// began, was answered by nobody all that time. Lost, it is taken off at once: its
// workers may no longer hold the true counts.
func (n *Node) stopPart(pt *owned, how leave) {
	p := pt.p
	pt.reg.Lock()
	if pt.stopped {
		pt.reg.Unlock()
		return
	}
	pt.stopped = true
	n.mu.Lock()
	n.unlist(pt)
	// Not started again here until this stop is over: two runs of one partition in one
	// process would write the same keys.
	if n.stopping == nil {
		n.stopping = map[int]time.Time{}
	}
	n.stopping[p] = time.Now()
	n.mu.Unlock()
	begun := time.Now()
	var stopped time.Duration
	defer func() {
		n.mu.Lock()
		delete(n.stopping, p)
		delete(n.slowStops, p)
		n.mu.Unlock()
		// Until here the partition cannot start again in this process, its last owner,
		// which the others leave it to: a slow stop is a partition owned by nobody.
		n.log.Debug("partition stopped", "partition", p, "how", how, "stages", stopped, "took", time.Since(begun))
	}()
	unserve := func() {
		for _, fam := range n.cfg.Families {
			n.query.SetOwner(fam.Name, p, nil)
		}
		n.query.SetStage(p, nil)
	}
	if how == leaveLost {
		unserve()
		pt.reg.Unlock()
		pt.halt()
		stopped = time.Since(begun)
		return
	}
	pt.reg.Unlock()
	pt.cancel() // the stage, and a backup under way
	pt.stageWG.Wait()
	if n.cfg.stopHook != nil {
		n.cfg.stopHook(p)
	}
	pt.stopWorkers()
	pt.wg.Wait()
	stopped = time.Since(begun)
	unserve() // its workers answer "stopped" by now, which readers ask again elsewhere
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if n.backups != nil && how == leaveCold {
		if _, err := n.backupPart(ctx, pt); err != nil {
			// The next owner restores an older backup and replays more deltas and log.
			n.log.Warn("cannot back a partition up before handing it over", "partition", p, "err", err)
		}
	}
	pt.backup.Lock() // no backup of this process's may follow the next owner's
	defer pt.backup.Unlock()
	pt.lease.Release(ctx)
}
