package node

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/tally-dev/tally/stages/cluster"
)

// A partition moves between processes as a standby takeover wherever it can: the
// assignment in force (cluster.Effective) keeps it with its live holder until its next
// owner's standby of it is warm, the holder then stops it and lets its lease go, and the
// next owner, woken by a watch of the ownership bucket, takes it at once (see rebalance).
// A stopping process (Close) hands its partitions over the same way (leave).

// plan reads the ownership bucket and computes where every partition is to go (target,
// cluster.Assign) and where each is to be now (want, cluster.Effective); both nil when no
// process but leaving ones is live.
func (n *Node) plan(ctx context.Context) (v cluster.View, target, want []string, err error) {
	leases := make([]string, n.cfg.Partitions)
	for p := range leases {
		leases[p] = counterKey(p)
	}
	if v, err = n.owners.View(ctx, leases...); err != nil {
		return v, nil, nil, err
	}
	holders, last := make([]string, n.cfg.Partitions), make([]string, n.cfg.Partitions)
	for p := range holders {
		holders[p] = v.Holders[counterKey(p)]
		if (holders[p] == "" || !slices.Contains(v.Members, holders[p])) && n.backups != nil {
			// A free partition (or one whose holder is gone: its lease outlives it) goes
			// back to its last owner when that one is live and has room — its state is
			// current there (no restore) — or else to its standby. Every lease lapses at once
			// when the ownership bucket has no leader for longer than the TTL (a NATS
			// server crash), and this keeps every partition where it was.
			// Not knowing it would deal the partition afresh: the round waits instead.
			if last[p], err = n.backups.LastOwner(ctx, counterObject(p)); err != nil {
				return v, nil, nil, fmt.Errorf("cannot read partition %d's last owner: %w", p, err)
			}
		}
	}
	if len(v.Members) == 0 {
		return v, nil, nil, nil
	}
	// Not to a last owner still stopping it (its lease lost): it cannot start it again
	// before the stop is over, which Badger may hold up for minutes; its standby takes
	// it over (TestLostPartitionNotLeftToItsStoppingOwner).
	target = cluster.Assign(v.Members, holders, last, n.cfg.Partitions, v.Said)
	return v, target, cluster.Effective(v.Live(), holders, target, v.Warm), nil
}

// moveWait is how long a partition held here has waited for its next owner's standby
// of it to get warm: waited counts the time up to last, except while that process said
// the standby was priming.
type moveWait struct {
	waited time.Duration
	last   time.Time
}

// losePatience moves, in want, the partitions held here that have waited MovePatience
// for their target's standby to get warm to their target all the same (see
// Config.MovePatience). Under rounds.
func (n *Node) losePatience(v cluster.View, target, want []string) {
	id, now := n.owners.ID(), time.Now()
	patience := n.cfg.MovePatience
	if patience <= 0 {
		patience = 30 * n.cfg.LeaseTTL
	}
	for p := range want {
		if want[p] != id || target[p] == id || !n.holds(p) {
			delete(n.waiting, p)
			continue
		}
		w := n.waiting[p]
		if w == nil {
			n.waiting[p] = &moveWait{last: now}
			continue
		}
		if !v.Priming[target[p]][p] {
			w.waited += now.Sub(w.last)
		}
		w.last = now
		if w.waited > patience {
			n.log.Warn("a partition's next owner has no warm standby of it yet; moving it all the same", "partition", p, "to", target[p], "waited", w.waited.Round(time.Second))
			want[p] = target[p]
			delete(n.waiting, p)
		}
	}
}

// handOver stops the partitions held here that want gives another process: one going
// to a warm standby is released as soon as it has stopped (the standby has followed
// it to its last log record and delta), one going elsewhere is backed up first.
func (n *Node) handOver(v cluster.View, want []string) {
	id := n.owners.ID()
	var wg sync.WaitGroup
	for _, pt := range n.heldParts() {
		to := want[pt.p]
		if to == id {
			continue
		}
		how := leaveCold
		if v.Warm[to][pt.p] {
			how = leaveWarm
		}
		n.log.Info("handing a counter partition over", "partition", pt.p, "to", to, "warm", how == leaveWarm)
		wg.Go(func() { n.stopPart(pt, how) })
	}
	wg.Wait()
}

// standbysOn says whether this process keeps standbys, and so tells the others which
// are warm (see renew).
func (n *Node) standbysOn() bool { return n.backups != nil && n.cfg.Standbys }

// watchOwners kicks a round whenever the ownership bucket says a hand-over may go on
// (cluster.Owners.Changes); the rounds every fifth of the TTL go on without it.
func (n *Node) watchOwners(ctx context.Context) {
	for ctx.Err() == nil {
		err := n.owners.Changes(ctx, n.kickRound)
		if ctx.Err() != nil {
			return
		}
		n.log.Debug("watching the ownership bucket again", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(n.cfg.LeaseTTL):
		}
	}
}

// kickRound asks for an ownership round now; one asked for already will do.
func (n *Node) kickRound() {
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// leave hands every partition held here over as a rebalance would, while it goes on
// serving them: it says it is leaving, so that the others assign its partitions among
// themselves, and lets each go once its next owner's standby of it is warm — a stop and
// a start, not a restore. What is still held after a few lease TTLs (a standby that
// cannot get warm) Close hands over cold.
func (n *Node) leave() {
	n.leaving.Store(true) // no round takes anything from now on
	n.rounds.Lock()       // nor is one under way
	defer n.rounds.Unlock()
	n.owners.SetLeaving()
	ctx, cancel := context.WithTimeout(n.runCtx, 5*n.cfg.LeaseTTL)
	defer cancel()
	if err := n.owners.Register(ctx); err != nil {
		n.log.Warn("cannot say this process is leaving", "err", err)
		return
	}
	n.stopStandbys() // the others choose new ones: this process no longer is a member
	// A partition whose start is under way is handed over once it has started.
	for len(n.heldParts()) > 0 || n.startingAny() {
		v, _, want, err := n.plan(ctx)
		if err == nil && want == nil {
			return // nobody to hand over to
		}
		if err == nil {
			n.handOver(v, want)
		}
		select {
		case <-ctx.Done():
			n.log.Warn("partitions not handed over to warm standbys in time; handing them over cold", "partitions", spans(n.Parts()))
			return
		case <-n.kick:
		case <-time.After(n.cfg.LeaseTTL / 10):
		}
	}
}
