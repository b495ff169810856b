package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

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
	lease   *lease
	stage   *event.Stage
	workers []*counter.Worker
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	backup  sync.Mutex // one backup of the partition at a time
}

// assign gives each partition one of members (sorted, non-empty), keeping where it
// can the partitions where holders (the live holder of each partition, "" when none)
// says they are: every member gets ⌊P/n⌋ or ⌈P/n⌉ partitions and keeps
// what it holds up to its room, giving up first those it ranks lowest; the rest go, each
// to the member with room that ranks it highest (rendezvous hashing). So a member joining
// moves its own share only, and a member leaving moves only what it held
// (TestAssign). Members compute it from what they read of the holders; while a
// hand-over is under way two may want the same partition, and its lease decides.
func assign(members, holders []string, partitions int) []string {
	n := len(members)
	held := map[string][]int{}
	for p, h := range holders {
		if p < partitions && slices.Contains(members, h) {
			held[h] = append(held[h], p)
		}
	}
	// The ⌈P/n⌉ rooms go to the members holding most (then by name), so that a member's
	// room shrinks only below what it holds when the members change.
	byHeld := slices.Clone(members)
	slices.SortStableFunc(byHeld, func(a, b string) int { return cmp.Compare(len(held[b]), len(held[a])) })
	room := map[string]int{}
	for i, m := range byHeld {
		room[m] = partitions / n
		if i < partitions%n {
			room[m]++
		}
	}
	score := func(m string, p int) uint64 {
		h := fnv.New64a()
		fmt.Fprintf(h, "%s/%d", m, p)
		return h.Sum64()
	}
	out := make([]string, partitions)
	for _, m := range members {
		ps := held[m]
		slices.SortFunc(ps, func(a, b int) int { return cmp.Compare(score(m, b), score(m, a)) }) // best first
		for _, p := range ps[:min(len(ps), room[m])] {
			out[p] = m
			room[m]--
		}
	}
	for p := range out {
		if out[p] != "" {
			continue
		}
		best := ""
		for _, m := range members {
			if room[m] > 0 && (best == "" || score(m, p) > score(best, p)) {
				best = m
			}
		}
		out[p] = best
		room[best]--
	}
	return out
}

// rebalance is one round of the ownership loop: hand over the partitions that are now
// another's and take the free ones that are this one's. The membership and leases are
// renewed apart (see own).
func (n *Node) rebalance(ctx context.Context) error {
	o := n.owners
	keys, err := o.kv.Keys(ctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
		return fmt.Errorf("cannot list the live processes: %w", err)
	}
	var members []string
	holders := make([]string, n.cfg.Partitions)
	for _, k := range keys {
		if id, ok := strings.CutPrefix(k, memberPrefix); ok {
			members = append(members, id)
		} else if p, err := strconv.Atoi(strings.TrimPrefix(k, counterPrefix)); err == nil && p >= 0 && p < len(holders) {
			holders[p] = o.holder(ctx, k)
		}
	}
	if !slices.Contains(members, o.id) {
		members = append(members, o.id)
	}
	slices.Sort(members)
	want := assign(members, holders, n.cfg.Partitions)
	for _, pt := range n.heldParts() {
		if want[pt.p] != o.id {
			n.log.Info("handing a counter partition over", "partition", pt.p, "to", want[pt.p])
			n.stopPart(pt.p, true)
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, len(want))
	for p, id := range want {
		if id == o.id && !n.holds(p) {
			wg.Go(func() { errs[p] = n.startPart(ctx, p) })
		}
	}
	wg.Wait()
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
	o := n.owners
	var wg sync.WaitGroup
	for _, pt := range n.heldParts() {
		wg.Go(func() {
			err := pt.lease.renew(ctx)
			if errors.Is(err, errLost) {
				n.log.Error("partition lease lost; stopping the partition", "partition", pt.p, "err", err)
				n.wg.Go(func() { n.stopPart(pt.p, false) }) // its workers' last flush must not hold the other renewals up
			} else if err != nil {
				n.log.Warn("cannot renew a partition lease yet", "partition", pt.p, "err", err)
			}
		})
	}
	_, err := o.kv.Put(ctx, memberPrefix+o.id, o.value)
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
		_ = every(ctx, period, func() error {
			if err := n.renew(ctx); err != nil && ctx.Err() == nil {
				n.log.Warn("cannot renew the leases yet", "err", err)
			}
			return nil
		})
	})
	return every(ctx, period, func() error {
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

func (n *Node) holds(p int) bool {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.parts[p] != nil
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

func counterObject(p int) string { return "counters." + strconv.Itoa(p) }

// startPart takes partition p's lease (ErrOwned when another process holds it), brings
// its state here unless this process was its last owner, and starts a counter worker per
// family and its event stage.
func (n *Node) startPart(ctx context.Context, p int) error {
	l, err := n.owners.take(ctx, counterKey(p))
	if err != nil {
		return err
	}
	pt := &part{p: p, lease: l}
	from, evFrom := "local", "local"
	if n.obs != nil {
		// The two pieces are restored side by side: their keys and pointers are apart.
		var cerr, eerr error
		var wg sync.WaitGroup
		wg.Go(func() { from, cerr = n.claim(ctx, n.counterPiece(p), l) })
		wg.Go(func() { evFrom, eerr = n.claimEvents(ctx, p, l) })
		wg.Wait()
		if err := errors.Join(cerr, eerr); err != nil {
			l.release(ctx)
			return fmt.Errorf("partition %d: %w", p, err)
		}
		if from != "local" {
			for _, f := range n.cfg.Families { // this directory's own, not the restored state's
				_ = os.Remove(counter.SnapshotPath(filepath.Join(n.cfg.DataDir, "snapshots"), f.Name, p))
			}
		}
	}
	pctx, cancel := context.WithCancel(n.runCtx)
	pt.cancel = cancel
	cc := n.counterConfig()
	cc.Valid = l.valid
	for i, fam := range n.cfg.Families {
		cc.Family, cc.Partition = fam, p
		cc.Publisher = n.cfg.faultyPublisher(n.js, uint64(1+p*len(n.cfg.Families)+i))
		w := counter.New(cc, n.js, n.db, n.log, &n.CounterStats)
		pt.workers = append(pt.workers, w)
		pt.wg.Go(func() {
			if err := w.Run(pctx); err != nil && pctx.Err() == nil {
				n.fail(err)
			}
		})
	}
	if err := n.startStage(pctx, pt); err != nil {
		cancel()
		pt.wg.Wait()
		l.release(ctx)
		return fmt.Errorf("partition %d: %w", p, err)
	}
	n.mu.Lock()
	n.parts[p] = pt
	n.mu.Unlock()
	for i, fam := range n.cfg.Families {
		n.query.SetOwner(fam.Name, p, pt.workers[i])
	}
	n.query.SetStage(p, pt.stage)
	if from != "local" {
		n.PartsRestored.Add(1)
	}
	if evFrom != "local" {
		n.takeover.Store(evFrom)
	}
	n.log.Debug("partition started", "partition", p, "counters", from, "events", evFrom)
	return nil
}

// stopPart stops partition p's event stage and workers (each checkpoints what it holds)
// and, handing it over, backs it up and releases its lease so that its next owner starts
// from here.
func (n *Node) stopPart(p int, handover bool) {
	n.mu.Lock()
	pt := n.parts[p]
	delete(n.parts, p)
	n.mu.Unlock()
	if pt == nil {
		return
	}
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
	if n.obs != nil {
		if _, err := n.backupPart(ctx, pt); err != nil {
			// The next owner restores an older backup and replays more deltas and log.
			n.log.Warn("cannot back a partition up before handing it over", "partition", p, "err", err)
		}
	}
	pt.backup.Lock() // no backup of this process's may follow the next owner's
	defer pt.backup.Unlock()
	pt.lease.release(ctx)
}
