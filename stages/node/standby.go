package node

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tally-dev/tally/pipeline/backoff"
	"github.com/tally-dev/tally/stages/cluster"
	"github.com/tally-dev/tally/stages/counter"
	"github.com/tally-dev/tally/stages/event"
)

// A standby is a warm copy of a partition that another process owns, kept here so that
// a takeover replays only a short tail instead of restoring the whole backup (Kafka
// Streams' standby tasks). cluster.Standbys names each partition's standby, and Assign
// hands a dead owner's partitions to their standbys. The standby starts from the
// partition's current backup (or from what this process has already, when it reflects
// that backup), then follows the owner:
//   - an event stage applies each record of the partition's log as the owner appends it
//     (event.Stage.Mirror);
//   - a counter worker per family applies the partition's deltas beside the owner's, and
//     keeps only the change events the owner has not stored (its Valid is false until
//     the takeover, so it answers nothing, sends nothing and purges nothing).
//
// An owner purges the deltas and log records up to its previous backup, not its last
// one; a standby that has reached a backup's positions while it was current cannot have
// missed anything purged, and one that did not starts again from the newest backup
// (backupWatch).
type standby struct {
	p       int
	workers []*counter.Worker // set before ready
	stage   *event.Stage      // following, set before ready
	// lease is the partition's, once this process takes it over: its workers are the
	// owner's from then on.
	lease         atomic.Pointer[cluster.Lease]
	cancel        context.CancelFunc // ends the following (the stage and the watch)
	workersCancel context.CancelFunc
	workersWG     sync.WaitGroup
	done          chan struct{} // closed when the following has ended
	ready         atomic.Bool   // primed and following
	current       atomic.Bool   // its state reflects both current backups (as last checked)
	caughtUp      atomic.Bool   // within StandbyLag of the owner's log and deltas (as last checked)
	broken        atomic.Bool   // cannot follow any more: to start again from the newest backup
	// retired is when this process last found it no longer needed it (Unix ns; 0 while
	// it does): no longer said to be warm, it follows on a moment (see keepStandbys).
	retired atomic.Int64
	watch   [2]backupWatch
	// unserve stops serving its workers' reads (see serveStandby); set by the following
	// once its workers run, read once it has ended.
	unserve func()
}

// warm reports whether sb is ready to take its partition over at once (see Standbys).
func (sb *standby) warm() bool {
	return sb.ready.Load() && sb.current.Load() && sb.caughtUp.Load() && !sb.broken.Load() && sb.retired.Load() == 0 && loaded(sb.workers)
}

// priming reports whether sb is on its way to warm: not yet primed (restoring a backup,
// or waiting for its turn) or primed and loading its tables; neither broken nor retired.
func (sb *standby) priming() bool {
	return !sb.broken.Load() && sb.retired.Load() == 0 && (!sb.ready.Load() || !loaded(sb.workers))
}

func (sb *standby) valid() bool {
	l := sb.lease.Load()
	return l != nil && l.Valid()
}

// backupWatch tells whether a standby reached each backup of a piece while the backup
// was current: only then is nothing it needs purged (see standby).
type backupWatch struct {
	gen     uint64 // the current backup's generation (cluster.Current.Gen)
	reached bool
}

// observe takes the current backup's generation and whether the standby's state
// reflects it now; false means a backup before it was never seen reached (or never seen
// at all) and may have been purged past.
func (w *backupWatch) observe(gen uint64, reached bool) bool {
	switch {
	case gen == w.gen:
		w.reached = w.reached || reached
		return true
	case gen == w.gen+1 && w.reached:
		w.gen, w.reached = gen, reached
		return true
	}
	return false
}

// keepStandbys starts the standbys this process should keep now and stops the others:
// those cluster.Standbys names it for, and one of each partition due to move here
// (cluster.Due), which moves once that standby is warm.
//
// A ready standby no longer needed is retired before it stops: no longer said to be
// warm, it follows on for half a lease TTL, so that a holder whose view of the
// ownership bucket still has it warm (read a moment before this round, or computed
// from a membership this one no longer sees) and hands the partition over finds it
// here and it moves warm, not as a restore.
func (n *Node) keepStandbys(members, want []string, due []int) {
	id := n.owners.ID()
	sbs := cluster.Standbys(members, want)
	now := time.Now().UnixNano()
	n.mu.Lock()
	defer n.mu.Unlock()
	for p, sb := range n.standbys {
		// One whose partition is starting here is startPart's, broken or not: it takes it
		// (warmStandby) and stops what it cannot take on before its claim restores. A
		// broken one stopped here meanwhile made its last checkpoint, and cleared the
		// counters (distrust), on its own goroutine, over the restore under way.
		if n.starting[p] {
			continue
		}
		// One this process is to own stays for startPart to take over (warmStandby).
		if !sb.broken.Load() && (sbs[p] == id || want[p] == id || slices.Contains(due, p)) {
			sb.retired.Store(0)
			continue
		}
		retired := sb.retired.Load()
		if !sb.broken.Load() && sb.ready.Load() && (retired == 0 || now-retired < int64(n.cfg.LeaseTTL/2)) {
			if retired == 0 {
				sb.retired.Store(now)
			}
			continue
		}
		n.log.Debug("standby stopped", "partition", p, "broken", sb.broken.Load(), "standby now", sbs[p], "owner now", want[p])
		delete(n.standbys, p)
		n.stopStandby(p, sb)
	}
	free := func(p int) bool {
		_, stopping := n.stopping[p]
		return n.parts[p] == nil && !stopping && !n.starting[p] && n.standbys[p] == nil && !n.standbyStops[p]
	}
	for _, p := range due { // nothing moves here before these are warm: they go first
		if free(p) {
			n.standbys[p] = n.startStandby(p)
		}
	}
	for _, p := range due {
		if sb := n.standbys[p]; sb == nil || !sb.warm() {
			return
		}
	}
	// New standbys wait until this process's own partitions have settled: while one
	// starts and right after, priming them (restoring backups) would take the CPU its
	// queries and its new partitions need.
	if len(n.starting) > 0 || time.Since(time.Unix(0, n.lastStart.Load())) < 2*n.cfg.LeaseTTL {
		return
	}
	for p, s := range sbs {
		if s == id && want[p] != id && free(p) {
			n.standbys[p] = n.startStandby(p)
		}
	}
}

// stopStandby stops standby sb of partition p, no longer kept here, on its own
// goroutine. Until its workers have made their last checkpoint and snapshot, p counts as
// still here: no standby of it starts again here, nor the partition (see rebalance). A
// standby restarted at once, as a broken one is, would otherwise run beside the stopping
// workers on the same keys and file — their last checkpoint written over the backup the
// new one restored, their snapshot over the one the new one dropped — and count deltas
// twice or not at all. Under mu.
func (n *Node) stopStandby(p int, sb *standby) {
	if n.standbyStops == nil {
		n.standbyStops = map[int]bool{}
	}
	n.standbyStops[p] = true
	n.wg.Go(func() {
		sb.stop()
		if sb.broken.Load() {
			n.distrust(p)
		}
		n.mu.Lock()
		delete(n.standbyStops, p)
		n.mu.Unlock()
		n.kickRound() // what waited for the stop goes on now
	})
}

// distrust clears partition p's counters here after a broken standby of it stopped,
// so that the next standby or start restores them from the backup. A standby that
// fell behind the owner's purges may have had its workers read on past deltas that
// were gone — the event stage stops at the first missing log record, the deltas' hop
// holds what comes above the hole — and its checkpoint then reflects the positions of
// the newest backup all the same: taken as it is, the hole would stay for good. Not
// when this process is the counters' last owner, whose state a claim takes as it is.
func (n *Node) distrust(p int) {
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.LeaseTTL) // on Close too
	defer cancel()
	last, err := n.backups.LastOwner(ctx, counterObject(p))
	if err == nil && last == n.owners.ID() {
		return
	}
	if err == nil {
		n.dropSnapshots(p)
		err = n.db.Clear(n.counterPiece(p).Keys)
	}
	if err != nil {
		n.log.Warn("cannot clear a broken standby's counters; the next standby takes them as they are if they reflect the backup", "partition", p, "err", err)
	}
}

// standbyStopping reports whether a standby of partition p is still stopping here.
func (n *Node) standbyStopping(p int) bool {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.standbyStops[p]
}

// stop ends a standby that is not taken over: its workers checkpoint what they hold.
func (sb *standby) stop() {
	sb.cancel()
	<-sb.done
	sb.stopWorkers()
}

// stopWorkers stops serving sb's reads and its counter workers, and waits until they
// have made their last checkpoint.
func (sb *standby) stopWorkers() {
	sb.stopServing()
	sb.workersCancel()
	sb.workersWG.Wait()
}

// takeStandby removes partition p's standby from those kept here (nil when none).
func (n *Node) takeStandby(p int) *standby {
	n.mu.Lock()
	defer n.mu.Unlock()
	sb := n.standbys[p]
	delete(n.standbys, p)
	return sb
}

// startStandby starts following partition p; priming it may restore a backup, which
// runs on its own rather than holding the ownership round up.
func (n *Node) startStandby(p int) *standby {
	ctx, cancel := context.WithCancel(n.runCtx)
	wctx, wcancel := context.WithCancel(n.runCtx)
	sb := &standby{p: p, cancel: cancel, workersCancel: wcancel, done: make(chan struct{})}
	n.wg.Go(func() {
		defer close(sb.done)
		if err := n.follow(ctx, wctx, sb); err != nil && ctx.Err() == nil {
			n.log.Warn("standby stopped; it starts again from the newest backup", "partition", p, "err", err)
			sb.broken.Store(true)
			n.StandbyRestarts.Add(1)
		}
	})
	return sb
}

// follow primes standby sb and follows its partition until ctx ends or it cannot.
func (n *Node) follow(ctx, wctx context.Context, sb *standby) error {
	p, id := sb.p, n.owners.ID()
	start := time.Now()
	pieces := [2]cluster.Piece{n.counterPiece(p), n.eventPiece(p)}
	var from [2]string
	select { // one prime at a time: a restore takes a core
	case n.priming <- struct{}{}:
	case <-ctx.Done():
		return nil
	}
	if n.cfg.primeHook != nil {
		n.cfg.primeHook(ctx, p)
	}
	for i, pc := range pieces {
		var cur cluster.Current
		var err error
		if from[i], cur, err = n.backups.Prime(ctx, pc, id); err != nil {
			<-n.priming
			return err
		}
		sb.watch[i] = backupWatch{gen: cur.Gen, reached: true}
	}
	<-n.priming
	sb.workers = n.runWorkers(wctx, p, sb.valid, &sb.workersWG, func(err error) {
		if sb.lease.Load() != nil { // taken over: the partition's own failure
			n.fail(err)
			return
		}
		n.log.Warn("standby counter worker stopped; it starts again from the newest backup", "partition", p, "err", err)
		sb.broken.Store(true)
		n.StandbyRestarts.Add(1)
	})
	sb.unserve = n.serveStandby(sb)
	ec := n.eventConfig(p)
	ec.Log = true
	st, err := event.New(ec, n.readJS, n.db, n.log, n.StandbyEvents)
	if err != nil {
		return err
	}
	n.log.Debug("standby following", "partition", p, "counters", from[0], "events", from[1], "took", time.Since(start))
	sb.stage = st
	sb.ready.Store(true)
	var wg sync.WaitGroup
	defer wg.Wait()
	fctx, stop := context.WithCancel(ctx) // the stage and the watch end together
	defer stop()                          // before the Wait
	errs := make(chan error, 2)
	wg.Go(func() { errs <- st.Mirror(fctx) })
	wg.Go(func() {
		errs <- cluster.Every(fctx, n.standbyCheck(), func() error { return n.checkStandby(fctx, sb, pieces) })
	})
	select {
	case err := <-errs:
		if err == nil && ctx.Err() == nil {
			err = errors.New("stopped following")
		}
		return err
	case <-ctx.Done():
		return nil
	}
}

// checkStandby reads the pointers of sb's pieces and stops the standby when it missed a
// backup (see backupWatch). NATS not answering is no reason to stop: the next check
// asks again.
func (n *Node) checkStandby(ctx context.Context, sb *standby, pieces [2]cluster.Piece) error {
	current := true
	for i, pc := range pieces {
		cur, err := n.backups.Current(ctx, pc.Name)
		if err != nil {
			return nil
		}
		reached, err := cluster.Reflects(pc, cur.Pos)
		if err != nil {
			return err
		}
		if !sb.watch[i].observe(cur.Gen, reached) {
			return errBehind
		}
		current = current && sb.watch[i].reached
	}
	sb.current.Store(current)
	if caught, err := n.caughtUp(ctx, sb); err == nil { // NATS not answering: as it was
		sb.caughtUp.Store(caught)
	}
	return nil
}

// caughtUp reports whether standby sb has applied every record of its partition's log,
// and every delta, that is older than StandbyLag: a takeover then replays only what the
// owner wrote in the last moment.
func (n *Node) caughtUp(ctx context.Context, sb *standby) (bool, error) {
	limit := n.cfg.StandbyLag
	if limit <= 0 {
		limit = DefaultStandbyLag
	}
	b, err := sb.stage.LogBehind(ctx)
	if err != nil || b.Age > limit {
		return false, err
	}
	for _, w := range sb.workers {
		if b, err = w.Behind(ctx); err != nil || b.Age > limit {
			return false, err
		}
	}
	return true, nil
}

// standbyCheck is how often a standby looks at the backups: several times within one
// backup period, so that it sees each backup while it is current.
func (n *Node) standbyCheck() time.Duration {
	if n.cfg.StandbyCheck > 0 {
		return n.cfg.StandbyCheck
	}
	return min(time.Second, n.cfg.BackupEvery/4)
}

// warmStandby ends the following of partition p's standby, which this process is
// taking over, and returns it when its counter workers reflect the partition's current
// backup (they go on as the owner's), and whether its event state may be taken as it is
// (when it reflects the backup too: see cluster.Piece.Warm).
func (n *Node) warmStandby(ctx context.Context, p int) (*standby, bool) {
	sb := n.takeStandby(p)
	if sb == nil {
		return nil, false
	}
	warm := sb.ready.Load() && !sb.broken.Load()
	start := time.Now()
	if warm {
		// A last owner that handed the partition over stored a backup as it left, a
		// moment ahead of the standby: the standby gets there too before it stops.
		deadline := time.Now().Add(n.cfg.LeaseTTL)
		for wait := backoff.New(10*time.Millisecond, 100*time.Millisecond); !n.reflectsBackups(ctx, p) && time.Now().Before(deadline); {
			if wait.Wait(ctx) != nil {
				break
			}
		}
	}
	sb.cancel()
	<-sb.done
	n.log.Debug("standby stopped following to take its partition over", "partition", p, "ready", warm, "took", time.Since(start))
	if warm = warm && !sb.broken.Load(); warm {
		cur, err := n.backups.Current(ctx, counterObject(p))
		ok, rerr := cluster.Reflects(n.counterPiece(p), cur.Pos)
		if err == nil && rerr == nil && ok {
			return sb, true
		}
	}
	sb.stopWorkers()
	if sb.broken.Load() { // as stopStandby does, but before the claim restores
		n.distrust(p)
	}
	return nil, warm
}

// reflectsBackups reports whether this process's state of partition p reflects both of
// its current backups.
func (n *Node) reflectsBackups(ctx context.Context, p int) bool {
	for _, pc := range []cluster.Piece{n.counterPiece(p), n.eventPiece(p)} {
		cur, err := n.backups.Current(ctx, pc.Name)
		if err != nil {
			return false
		}
		if ok, err := cluster.Reflects(pc, cur.Pos); err != nil || !ok {
			return false
		}
	}
	return true
}

// Standbys lists the partitions of which this process keeps a warm copy: one that has
// reached the partition's current backups, its counters loaded, and is caught up with
// its owner (within StandbyLag): a takeover now replays only the last moment.
func (n *Node) Standbys() []int { return n.standbysWhere((*standby).warm) }

// primingStandbys lists the partitions whose standby here is on its way to warm (see
// standby.priming and cluster.Owners.SetPriming).
func (n *Node) primingStandbys() []int { return n.standbysWhere((*standby).priming) }

// standbysWhere lists, sorted, the partitions whose standby here is as keep says.
func (n *Node) standbysWhere(keep func(*standby) bool) []int {
	n.mu.RLock()
	defer n.mu.RUnlock()
	var ps []int
	for p, sb := range n.standbys {
		if keep(sb) {
			ps = append(ps, p)
		}
	}
	slices.Sort(ps)
	return ps
}

// StandbyLag is how many stream messages (events and deltas) this process's ready
// standbys have not applied yet, summed: what taking their partitions over would replay
// beyond the owners' own lag.
func (n *Node) StandbyLag(ctx context.Context) (uint64, error) {
	n.mu.RLock()
	var sbs []*standby
	for _, sb := range n.standbys {
		if sb.ready.Load() {
			sbs = append(sbs, sb)
		}
	}
	n.mu.RUnlock()
	var sum uint64
	for _, sb := range sbs {
		lag, err := sb.stage.Lag(ctx)
		if err != nil {
			return 0, err
		}
		sum += lag
		for _, w := range sb.workers {
			if lag, err = w.Lag(ctx); err != nil {
				return 0, err
			}
			sum += lag
		}
	}
	return sum, nil
}

// loaded reports whether every worker has loaded its table.
func loaded(ws []*counter.Worker) bool {
	for _, w := range ws {
		if !w.Ready() {
			return false
		}
	}
	return true
}

// stopStandbys stops every standby (on Close).
func (n *Node) stopStandbys() {
	n.mu.Lock()
	sbs := n.standbys
	n.standbys = map[int]*standby{}
	n.mu.Unlock()
	for p, sb := range sbs {
		sb.stop()
		if sb.broken.Load() {
			n.distrust(p)
		}
	}
}
