package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/tally-dev/tally/pipeline/backoff"
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

// owned is one partition owned by this process: its event stage and its counters of
// every family, under one lease.
type owned struct {
	p       int
	lease   *cluster.Lease
	stage   *event.Stage
	workers []*counter.Worker
	// ctx ends as the partition's stop begins (cancel): its stage stops, and a backup
	// under way. Its workers stop after the stage (stopWorkers), answering reads until
	// they have (see stopPart).
	ctx         context.Context
	cancel      context.CancelFunc
	stopWorkers context.CancelFunc
	stageWG     sync.WaitGroup // the stage
	wg          sync.WaitGroup // the workers
	backup      sync.Mutex     // one backup of the partition at a time
	// kept are the positions of the previous backup, under backup: what is purged (see
	// backupPart).
	kept struct {
		deltas []uint64
		log    uint64
	}
	// reg orders the partition's registration with the query server (startPart) and its
	// removal (stopPart), which stopped says has begun: a stop may come while the start
	// is still under way — its stage fenced at its first write, on its own goroutine.
	reg     sync.Mutex
	stopped bool
}

// rebalance is one round of the ownership loop: hand over the partitions that are now
// another's and take the free ones that are this one's. The membership and leases are
// renewed apart (see own). A partition moves to a process that keeps standbys only once
// its standby there is warm (cluster.Effective): until then it keeps a standby of each
// partition due to it, and the holder goes on serving.
//
// The partitions taken start on goroutines of their own, which the round does not wait
// for unless wait (the first round, in Start): a start that restores a backup may take
// longer than a lease TTL, and the next rounds must go on meanwhile — hand-overs, and
// the other partitions due here, taken as soon as they are free.
func (n *Node) rebalance(ctx context.Context, wait bool) error {
	n.rounds.Lock()
	defer n.rounds.Unlock()
	if n.leaving.Load() { // Close hands over what is held here (see leave)
		return nil
	}
	begun := time.Now()
	v, target, want, err := n.plan(ctx)
	if err != nil {
		return err
	}
	planned := time.Since(begun)
	id := n.owners.ID()
	n.losePatience(v, target, want)
	n.handOver(v, want)
	var wg sync.WaitGroup
	errs := make([]error, len(want))
	var started []int
	for p, owner := range want {
		if owner != id || n.holds(p) || n.standbyStopping(p) { // the next round, once stopped
			continue
		}
		if n.retryLater(p) {
			continue
		}
		started = append(started, p)
		n.mu.Lock()
		n.starting[p] = true
		n.mu.Unlock()
		start := func() error {
			err := n.startPart(ctx, p)
			n.mu.Lock()
			delete(n.starting, p)
			n.startDone(p, err)
			n.mu.Unlock()
			return err
		}
		if wait {
			wg.Go(func() { errs[p] = start() })
			continue
		}
		n.starts.Go(func() {
			if err := start(); err != nil && !errors.Is(err, ErrOwned) && ctx.Err() == nil {
				n.log.Warn("cannot start a partition; retrying at the next round", "partition", p, "err", err)
			}
		})
	}
	wg.Wait()
	if took := time.Since(begun); took > n.cfg.LeaseTTL {
		n.log.Info("an ownership round took longer than a lease TTL", "took", took, "planned in", planned, "started", spans(started))
	} else if len(started) > 0 {
		n.log.Debug("ownership round", "took", took, "planned in", planned, "started", spans(started))
	}
	if n.standbysOn() {
		n.keepStandbys(v.Members, want, cluster.Due(id, target, want))
	}
	for p, err := range errs {
		switch {
		case errors.Is(err, cluster.ErrDamagedBackup):
			// Not this process's to start, but its last owner's: the process starts
			// without it (a failed start here would stop it, and every start after).
			n.log.Error("cannot start a partition: its backup cannot be read; leaving it to its last owner", "partition", p, "err", err)
		case err != nil && !errors.Is(err, ErrOwned):
			return err
		}
	}
	return nil
}

// startRetry paces the starts of a partition whose start failed: a failed start lets its
// lease go, which kicks every process's round at once, and a failure that stays (a
// backup that cannot be read: TestChaosCluster, seed 7) was tried some 30 times a
// second, each reading the backup from NATS again.
type startRetry struct {
	wait *backoff.Backoff
	at   time.Time
	// damaged: the last start failed on a backup that cannot be read
	// (cluster.ErrDamagedBackup). Until its pause is over the membership says so
	// (Refused), and the partition goes to its last owner, who alone can start it.
	damaged bool
}

// retryLater reports whether partition p's start failed last and its pause is not over.
func (n *Node) retryLater(p int) bool {
	n.mu.RLock()
	defer n.mu.RUnlock()
	r := n.retries[p]
	return r != nil && time.Now().Before(r.at)
}

// startDone notes how partition p's start ended: a failure (but being owned elsewhere)
// pauses its next start, from a fifth of a lease TTL growing to 10 TTLs; a success
// forgets the failures. Under mu.
func (n *Node) startDone(p int, err error) {
	if err == nil || errors.Is(err, ErrOwned) {
		delete(n.retries, p)
		return
	}
	r := n.retries[p]
	if r == nil {
		r = &startRetry{wait: backoff.New(n.cfg.LeaseTTL/5, 10*n.cfg.LeaseTTL)}
		n.retries[p] = r
	}
	r.at = time.Now().Add(r.wait.Next())
	r.damaged = errors.Is(err, cluster.ErrDamagedBackup)
}

// Refused lists the partitions whose last start here failed on a backup that cannot be
// read, while their pause lasts (see startRetry.damaged): the membership says so, and
// the others leave them to their last owner.
func (n *Node) Refused() []int {
	n.mu.RLock()
	defer n.mu.RUnlock()
	var ps []int
	now := time.Now()
	for p, r := range n.retries {
		if r.damaged && now.Before(r.at) {
			ps = append(ps, p)
		}
	}
	slices.Sort(ps)
	return ps
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
				n.wg.Go(func() { n.stopPart(pt, leaveLost) }) // its workers' last flush must not hold the other renewals up
			} else if err != nil {
				n.log.Warn("cannot renew a partition lease yet", "partition", pt.p, "err", err)
			}
		})
	}
	if n.standbysOn() {
		n.owners.SetWarm(n.Standbys())
		n.owners.SetPriming(n.primingStandbys())
	}
	n.owners.SetStopping(n.stoppingParts())
	n.owners.SetRefused(n.Refused())
	err := n.owners.Register(ctx)
	wg.Wait()
	if err != nil {
		return fmt.Errorf("cannot renew the membership: %w", err)
	}
	return nil
}

// own runs rebalance every fifth of the lease TTL until ctx ends, and at once when a
// lease is let go or a membership changes (a hand-over under way); it renews the leases
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
	wg.Go(func() { n.watchOwners(ctx) })
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-n.kick:
		}
		if err := n.rebalance(ctx, false); err != nil && ctx.Err() == nil {
			n.log.Warn("ownership round failed; retrying", "err", err)
		}
	}
}

func (n *Node) heldParts() []*owned {
	n.mu.RLock()
	defer n.mu.RUnlock()
	out := make([]*owned, 0, len(n.parts))
	for _, pt := range n.parts {
		out = append(out, pt)
	}
	slices.SortFunc(out, func(a, b *owned) int { return a.p - b.p })
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

// stoppingParts lists the partitions whose stop here has taken longer than a lease TTL:
// the others no longer leave them to this process (see plan). A stop is quick as a
// rule, and a partition whose lease lapsed (the ownership bucket without a leader) is
// taken again by its last owner, from its own state; one held up — a last checkpoint
// behind Badger's compactions took up to 10 minutes under a 27 M-id backlog — is taken
// over by its standby.
func (n *Node) stoppingParts() []int {
	n.mu.Lock()
	defer n.mu.Unlock()
	var ps []int
	for p, since := range n.stopping {
		if time.Since(since) <= n.cfg.LeaseTTL {
			continue
		}
		ps = append(ps, p)
		if !n.slowStops[p] {
			if n.slowStops == nil {
				n.slowStops = map[int]bool{}
			}
			n.slowStops[p] = true
			n.SlowStops.Add(1)
			n.log.Warn("a partition's stop has taken longer than a lease TTL; its standby may take it over", "partition", p, "since", since)
		}
	}
	slices.Sort(ps)
	return ps
}

// holds reports whether partition p runs here, or is still starting or stopping.
func (n *Node) holds(p int) bool {
	n.mu.RLock()
	defer n.mu.RUnlock()
	_, stopping := n.stopping[p]
	return n.parts[p] != nil || stopping || n.starting[p]
}

// startingAny reports whether a partition's start is under way here.
func (n *Node) startingAny() bool {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return len(n.starting) > 0
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
