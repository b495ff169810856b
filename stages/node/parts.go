package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/tally-dev/tally/stages/cluster"
	"github.com/tally-dev/tally/stages/counter"
	"github.com/tally-dev/tally/stages/event"
)

// Partitions are spread over the live processes of a prefix: each one's event stage and
// counters together. Each process
// registers itself under members.<node id> in the ownership bucket and renews it; every
// few seconds it computes the same assignment of partitions to the live members (assign),
// hands over the partitions it holds that are now another's (stop, back up, release the
// lease) and takes the free ones that are its own (lease, restore the last backup unless
// it was the last owner, start). A partition's lease is renewed by compare-and-set; a
// process that cannot renew one in time stops that partition, and one that was paused
// past its TTL finds every lease gone and stops them all before doing anything else.

// part is one partition owned by this process: its event stage and its counters of
// every family, under one lease.
type part struct {
	p       int
	lease   *cluster.Lease
	stage   *event.Stage
	workers []*counter.Worker
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	backup  sync.Mutex // one backup of the partition at a time
	// kept are the positions of the previous backup, under backup: what is purged (see
	// backupPart).
	kept struct {
		deltas []uint64
		log    uint64
	}
}

// rebalance is one round of the ownership loop: hand over the partitions that are now
// another's and take the free ones that are this one's. The membership and leases are
// renewed apart (see own).
func (n *Node) rebalance(ctx context.Context) error {
	members, held, err := n.owners.Snapshot(ctx)
	if err != nil {
		return err
	}
	holders, last := make([]string, n.cfg.Partitions), make([]string, n.cfg.Partitions)
	for p := range holders {
		holders[p] = held[counterKey(p)]
		if (holders[p] == "" || !slices.Contains(members, holders[p])) && n.backups != nil {
			// A free partition (or one whose holder is gone: its lease outlives it) goes
			// back to its last owner when that one is live and has room — its state is
			// current there (no restore) — or else to its standby. Every lease lapses at once
			// when the ownership bucket has no leader for longer than the TTL (a NATS
			// server crash), and this keeps every partition where it was.
			// Not knowing it would deal the partition afresh: the round waits instead.
			if last[p], err = n.backups.LastOwner(ctx, counterObject(p)); err != nil {
				return fmt.Errorf("cannot read partition %d's last owner: %w", p, err)
			}
		}
	}
	id := n.owners.ID()
	want := cluster.Assign(members, holders, last, n.cfg.Partitions)
	for _, pt := range n.heldParts() {
		if want[pt.p] != id {
			n.log.Info("handing a counter partition over", "partition", pt.p, "to", want[pt.p])
			n.stopPart(pt.p, true)
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, len(want))
	for p, owner := range want {
		if owner == id && !n.holds(p) {
			wg.Go(func() { errs[p] = n.startPart(ctx, p) })
		}
	}
	wg.Wait()
	if n.backups != nil && n.cfg.Standbys {
		n.keepStandbys(members, want)
	}
	for _, err := range errs {
		if err != nil && !errors.Is(err, ErrOwned) {
			return err
		}
	}
	return nil
}

// renew renews this process's membership and the leases of its counter partitions, each
// on its own: a renewal left unanswered (a NATS leader election) is retried until its
// TTL, and must not hold the others up. A partition whose lease is lost stops at once,
// without a backup.
func (n *Node) renew(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, l := range n.claimingLeases() { // restoring a backup may take longer than the TTL
		wg.Go(func() {
			if err := l.Renew(ctx); err != nil && !errors.Is(err, cluster.ErrLost) {
				n.log.Warn("cannot renew a partition lease yet", "key", l.Key(), "err", err)
			}
		})
	}
	for _, pt := range n.heldParts() {
		wg.Go(func() {
			err := pt.lease.Renew(ctx)
			if errors.Is(err, cluster.ErrLost) {
				n.log.Error("partition lease lost; stopping the partition", "partition", pt.p, "err", err)
				n.wg.Go(func() { n.stopPart(pt.p, false) }) // its workers' last flush must not hold the other renewals up
			} else if err != nil {
				n.log.Warn("cannot renew a partition lease yet", "partition", pt.p, "err", err)
			}
		})
	}
	err := n.owners.Register(ctx)
	wg.Wait()
	if err != nil {
		return fmt.Errorf("cannot renew the membership: %w", err)
	}
	return nil
}

// own runs rebalance every fifth of the lease TTL until ctx ends, and renews the leases
// on their own meanwhile, so that a long restore in a round does not let them expire.
func (n *Node) own(ctx context.Context) error {
	period := n.cfg.LeaseTTL / 5
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		_ = cluster.Every(ctx, period, func() error {
			if err := n.renew(ctx); err != nil && ctx.Err() == nil {
				n.log.Warn("cannot renew the leases yet", "err", err)
			}
			return nil
		})
	})
	return cluster.Every(ctx, period, func() error {
		if err := n.rebalance(ctx); err != nil && ctx.Err() == nil {
			n.log.Warn("ownership round failed; retrying", "err", err)
		}
		return nil
	})
}

func (n *Node) heldParts() []*part {
	n.mu.RLock()
	defer n.mu.RUnlock()
	out := make([]*part, 0, len(n.parts))
	for _, pt := range n.parts {
		out = append(out, pt)
	}
	slices.SortFunc(out, func(a, b *part) int { return a.p - b.p })
	return out
}

// claimingLeases are the leases of the partitions being started here.
func (n *Node) claimingLeases() []*cluster.Lease {
	n.mu.RLock()
	defer n.mu.RUnlock()
	ls := make([]*cluster.Lease, 0, len(n.claiming))
	for _, l := range n.claiming {
		ls = append(ls, l)
	}
	return ls
}

// holds reports whether partition p runs here, or is still stopping.
func (n *Node) holds(p int) bool {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.parts[p] != nil || n.stopping[p]
}

// Parts lists the partitions this process owns.
func (n *Node) Parts() []int {
	var ps []int
	for _, pt := range n.heldParts() {
		ps = append(ps, pt.p)
	}
	return ps
}

func (n *Node) families() []string {
	fams := make([]string, len(n.cfg.Families))
	for i, f := range n.cfg.Families {
		fams[i] = f.Name
	}
	return fams
}

// counterKey is partition p's lease key: it covers the partition's event stage and its
// counters of every family (the name is older than the stages' spreading).
func counterKey(p int) string { return "counters." + strconv.Itoa(p) }

func counterObject(p int) string { return "counters." + strconv.Itoa(p) }

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
	pt, begun := &part{p: p, lease: l}, time.Now()
	sb, evWarm := n.warmStandby(ctx, p)
	from, evFrom := "local", "local"
	if n.backups != nil {
		// The two pieces are restored side by side: their keys and pointers are apart.
		var cerr, eerr error
		var wg sync.WaitGroup
		cpc := n.counterPiece(p)
		cpc.Warm = sb != nil
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
		if from != "local" && from != "standby" {
			n.dropSnapshots(p)
		}
	}
	pctx, cancel := context.WithCancel(n.runCtx)
	pt.cancel = cancel
	if sb != nil { // its workers, which have applied what the last owner had, are ours now
		sb.lease.Store(l)
		pt.workers = sb.workers
		pt.cancel = func() { cancel(); sb.workersCancel() }
		pt.wg.Go(sb.workersWG.Wait)
	} else {
		pt.workers = n.runWorkers(pctx, p, l.Valid, &pt.wg, n.fail)
	}
	if err := n.startStage(pctx, pt); err != nil {
		pt.cancel()
		pt.wg.Wait()
		l.Release(ctx)
		return fmt.Errorf("partition %d: %w", p, err)
	}
	n.mu.Lock()
	n.parts[p] = pt
	n.mu.Unlock()
	n.lastStart.Store(time.Now().UnixNano())
	for i, fam := range n.cfg.Families {
		n.query.SetOwner(fam.Name, p, pt.workers[i])
	}
	n.query.SetStage(p, pt.stage)
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
		w := counter.New(cc, n.js, n.db, n.log, &n.CounterStats)
		ws = append(ws, w)
		wg.Go(func() {
			if err := w.Run(ctx); err != nil && ctx.Err() == nil {
				failed(err)
			}
		})
	}
	return ws
}

// dropSnapshots removes partition p's counter snapshots: they are of this directory's
// older state, not of the state just brought here.
func (n *Node) dropSnapshots(p int) {
	for _, f := range n.cfg.Families {
		_ = os.Remove(counter.SnapshotPath(filepath.Join(n.cfg.DataDir, "snapshots"), f.Name, p))
	}
}

// stopPart stops partition p's event stage and workers (each checkpoints what it holds)
// and, handing it over, backs it up and releases its lease so that its next owner starts
// from here.
func (n *Node) stopPart(p int, handover bool) {
	n.mu.Lock()
	pt := n.parts[p]
	delete(n.parts, p)
	if pt != nil {
		// Not started again here until this stop is over: two runs of one partition in
		// one process would write the same keys.
		if n.stopping == nil {
			n.stopping = map[int]bool{}
		}
		n.stopping[p] = true
	}
	n.mu.Unlock()
	if pt == nil {
		return
	}
	defer func() {
		n.mu.Lock()
		delete(n.stopping, p)
		n.mu.Unlock()
	}()
	for _, fam := range n.cfg.Families {
		n.query.SetOwner(fam.Name, p, nil)
	}
	n.query.SetStage(p, nil)
	pt.cancel()
	pt.wg.Wait()
	if !handover {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if n.backups != nil {
		if _, err := n.backupPart(ctx, pt); err != nil {
			// The next owner restores an older backup and replays more deltas and log.
			n.log.Warn("cannot back a partition up before handing it over", "partition", p, "err", err)
		}
	}
	pt.backup.Lock() // no backup of this process's may follow the next owner's
	defer pt.backup.Unlock()
	pt.lease.Release(ctx)
}
