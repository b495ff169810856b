package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/natstest"
	"github.com/tally-dev/tally/stages/query"
)

// A free partition goes back to its last owner, unless that one says it is still
// stopping it: then to its warm standby. A lost partition's stop took up to 10 minutes
// under a 27 M-id backlog (its last checkpoint behind Badger's compactions), and the
// others left the partition to its last owner all that time: owned by nobody.
func TestLostPartitionNotLeftToItsStoppingOwner(t *testing.T) {
	r := newPartRig(t)
	a, b := r.process(), r.process()
	// a owned partition 0 (the pointer names it); its lease is gone.
	la := r.take(a)
	if _, err := a.backups.Claim(t.Context(), a.counterPiece(0), la); err != nil {
		t.Fatal(err)
	}
	la.Release(t.Context())
	b.owners.SetWarm([]int{0})
	plan := func(stopping []int) string {
		t.Helper()
		a.owners.SetStopping(stopping)
		for _, n := range []*Node{a, b} {
			if err := n.owners.Register(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		_, _, want, err := b.plan(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return want[0]
	}
	if got := plan(nil); got != a.owners.ID() {
		t.Fatalf("partition 0 planned for %s, want its last owner %s", got, a.owners.ID())
	}
	if got := plan([]int{0}); got != b.owners.ID() {
		t.Fatalf("partition 0 planned for %s while its last owner is stopping it, want its standby %s", got, b.owners.ID())
	}
}

// A process says it is stopping a partition only once the stop has taken longer than a
// lease TTL: a lapse of every lease (the ownership bucket without a leader) leaves each
// partition to its last owner, whose stops are quick.
func TestStoppingPartsAfterATTL(t *testing.T) {
	n := &Node{cfg: Config{LeaseTTL: time.Second}, log: slog.New(slog.DiscardHandler), stopping: map[int]time.Time{
		3: time.Now().Add(-2 * time.Second), 5: time.Now(),
	}}
	for range 2 {
		if got := n.stoppingParts(); len(got) != 1 || got[0] != 3 {
			t.Fatalf("stopping %v, want [3]", got)
		}
	}
	if got := n.SlowStops.Load(); got != 1 {
		t.Fatalf("%d slow stops counted, want 1 (each stop once)", got)
	}
}

// A round does not wait for the partitions it starts: a start that takes long (a
// restore of a large backup) must not keep the other partitions due here unowned. Here
// b's first start is held; then a stops, and its partitions, free and b's, must start
// at b meanwhile. On the old code b's rounds waited for that first start, and a's
// partitions were owned by nobody until it ended.
func TestSlowStartHoldsNoOtherUp(t *testing.T) {
	config := joinConfig(t, 4, time.Second, func(cfg *Config) { cfg.Standbys = false })
	_, closeA := startFirst(t, config())
	held, release := make(chan int, 1), make(chan struct{})
	var first atomic.Bool
	cfg := config()
	// The first start here is slow, until released.
	cfg.startHook = holdStarts(func(int) bool { return first.CompareAndSwap(false, true) }, func(p int) { held <- p }, release)
	b, _ := startFirst(t, cfg)
	defer close(release)
	var slow int
	select {
	case slow = <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("no partition moved to b")
	}
	if err := closeA(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for len(b.Parts()) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("b owns %v while its start of partition %d is under way; want every other partition: a round waited for that start", b.Parts(), slow)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if slices.Contains(b.Parts(), slow) {
		t.Fatalf("partition %d started while its start was held", slow)
	}
}

// A broken standby of a partition that is starting here is left to the start
// (warmStandby), which stops its workers before the claim restores. A round stopped it
// on its own goroutine while the start ran, and the stop's last checkpoint and its
// clearing of the counters (distrust) landed on the keys the claim had just restored:
// the new owner's counters held nothing, or half of the backup.
func TestBrokenStandbyLeftToItsStart(t *testing.T) {
	config := joinConfig(t, 2, 200*time.Millisecond, nil)
	_, closeA := startFirst(t, config())
	var target atomic.Int64 // the partition whose start is held (-1: none yet)
	target.Store(-1)
	held, release := make(chan struct{}), make(chan struct{})
	cfg := config()
	cfg.startHook = holdStarts(func(p int) bool { return int64(p) == target.Load() }, func(int) { close(held) }, release)
	b, _ := startFirst(t, cfg)
	releaseNow := releaser(t, release)
	var p int
	natstest.Eventually(t, time.Minute, "a warm standby at b of a's partition", func() (bool, string) {
		sbs := b.Standbys()
		if len(sbs) == 0 {
			return false, fmt.Sprintf("b owns %v, keeps no warm standby", b.Parts())
		}
		p = sbs[0]
		return true, ""
	})
	target.Store(int64(p))
	go closeA() // hands p over to b, whose start of it is held
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatalf("b did not start partition %d", p)
	}
	b.mu.RLock()
	sb := b.standbys[p]
	b.mu.RUnlock()
	if sb == nil {
		t.Fatalf("b's standby of partition %d is gone before its start took it", p)
	}
	sb.broken.Store(true) // as a standby that missed a backup is, a moment before
	for range 3 {         // rounds while the start is under way
		b.kickRound()
		time.Sleep(cfg.LeaseTTL / 2)
	}
	b.mu.RLock()
	kept, stopping := b.standbys[p] == sb, b.standbyStops[p]
	b.mu.RUnlock()
	if !kept || stopping {
		t.Fatalf("b's broken standby of partition %d: kept %v, stopping %v while its start was under way; want it left to the start", p, kept, stopping)
	}
	releaseNow()
	natstest.Eventually(t, 30*time.Second, "b owns the partition", func() (bool, string) {
		return slices.Contains(b.Parts(), p), fmt.Sprint("b owns ", b.Parts())
	})
	b.mu.RLock()
	_, still := b.standbys[p]
	b.mu.RUnlock()
	if still {
		t.Fatalf("b owns partition %d and still keeps a standby of it", p)
	}
}

// joinConfig returns configurations of joining processes on one new NATS server, each
// with its own data directory: partitions, backups every backupEvery, lease 1 s, flush
// 20 ms, then edit (when not nil).
func joinConfig(t *testing.T, partitions int, backupEvery time.Duration, edit func(*Config)) func() Config {
	s := natstest.Start(t)
	return func() Config {
		cfg := DefaultConfig()
		cfg.DataDir, cfg.NATSURL, cfg.Partitions = t.TempDir(), s.ClientURL(), partitions
		cfg.Join, cfg.BackupEvery = true, backupEvery
		cfg.LeaseTTL, cfg.FlushInterval = time.Second, 20*time.Millisecond
		if edit != nil {
			edit(&cfg)
		}
		return cfg
	}
}

// startFirst starts a process with cfg and returns it with its Close, which the test
// calls when it is to leave (at most once): otherwise it is closed at the end.
func startFirst(t *testing.T, cfg Config) (*Node, func() error) {
	n, err := Start(t.Context(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	var cerr error
	closeIt := func() error {
		once.Do(func() { cerr = n.Close() })
		return cerr
	}
	t.Cleanup(func() { _ = closeIt() })
	return n, closeIt
}

// releaser returns a func that closes release, at most once; the test's end closes it if
// the test did not (before the processes started before it are closed).
func releaser(t *testing.T, release chan struct{}) func() {
	var once sync.Once
	f := func() { once.Do(func() { close(release) }) }
	t.Cleanup(f)
	return f
}

// holdStarts returns a start hook that holds each start picks chooses, after telling
// held of it, until release is closed or the start's ctx ends.
func holdStarts(picks func(p int) bool, held func(p int), release <-chan struct{}) func(context.Context, int) {
	return func(ctx context.Context, p int) {
		if !picks(p) {
			return
		}
		held(p)
		select {
		case <-release:
		case <-ctx.Done():
		}
	}
}

// A partition due to move to a joining process stays with its holder for as long as
// that process says its standby of it is priming, however much longer than
// MovePatience that takes, and then moves warm. Priming grows with a partition's state,
// one standby at a time: with 10 M ids (BenchmarkFailover's rejoin) it took minutes,
// and the holder, its patience lost after 30 lease TTLs, moved the partitions cold —
// each restored at the taker and unanswered for the minutes that took.
func TestMoveWaitsForAPrimingStandby(t *testing.T) {
	const patience = 300 * time.Millisecond
	config := joinConfig(t, 2, 200*time.Millisecond, func(cfg *Config) { cfg.MovePatience = patience })
	a, _ := startFirst(t, config())
	natstest.Eventually(t, 30*time.Second, "a backup of a's partitions", func() (bool, string) {
		return a.Backups.Load() > 0, fmt.Sprint(a.Backups.Load(), " backup rounds")
	})
	held, release := make(chan int, 2), make(chan struct{})
	cfg := config()
	cfg.primeHook = func(ctx context.Context, p int) {
		held <- p
		select {
		case <-release:
		case <-ctx.Done():
		}
	}
	b, _ := startFirst(t, cfg)
	releaseNow := releaser(t, release)
	var p int
	select {
	case p = <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("b primed no standby")
	}
	for end := time.Now().Add(10 * patience); time.Now().Before(end); time.Sleep(patience / 10) {
		if got := b.Parts(); len(got) > 0 || b.PartsRestored.Load() > 0 {
			t.Fatalf("b owns %v (%d restored) while its standby of partition %d primes: moved cold (patience %v)", got, b.PartsRestored.Load(), p, patience)
		}
	}
	if !slices.Contains(a.Parts(), p) {
		t.Fatalf("partition %d is not a's while b primes its standby: a owns %v", p, a.Parts())
	}
	releaseNow()
	// Counted as its start ends, a moment after the partition is listed.
	natstest.Eventually(t, 30*time.Second, "b owns partition "+fmt.Sprint(p), func() (bool, string) {
		return slices.Contains(b.Parts(), p) && b.PartsRestored.Load()+b.PartsWarm.Load() > 0, fmt.Sprint("b owns ", b.Parts())
	})
	if b.PartsRestored.Load() != 0 || b.PartsWarm.Load() != 1 {
		t.Fatalf("b took %d partitions over from standbys and restored %d, want 1 and 0", b.PartsWarm.Load(), b.PartsRestored.Load())
	}
}

// A partition handed over warm is served by its giver until the giver's workers have
// stopped: its stage stops first, then its workers checkpoint what they hold, answering
// reads meanwhile. The stop took the partition off the query path as it began, and a
// last checkpoint and snapshot that took seconds under load (up to 9 s with 10 M ids)
// were seconds in which no process answered an exact read of it.
func TestHandOverServedUntilStopped(t *testing.T) {
	// Its lease, not renewed while it stops, does not lapse while the stop is held: the
	// taker would take the partition then, and serve it.
	const ttl = 8 * time.Second
	config := joinConfig(t, 2, 200*time.Millisecond, func(cfg *Config) { cfg.LeaseTTL = ttl })
	held, release := make(chan int, 2), make(chan struct{})
	cfg := config()
	var holding atomic.Bool
	cfg.stopHook = func(p int) {
		if !holding.CompareAndSwap(false, true) {
			return // one stop held is enough
		}
		held <- p
		<-release
	}
	a, _ := startFirst(t, cfg)
	releaseNow := releaser(t, release)
	nc, err := nats.Connect(cfg.NATSURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c, err := client.New(nc, client.WithPartitions(cfg.Partitions), client.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// Two posts in each partition, viewed 3 and 4 times; each id, as a user, likes post
	// liked (a relation of the user's partition, which its owner answers).
	const liked = 1000
	var ids []uint64
	want, inPart := map[uint64]uint64{}, map[int]int{}
	for id := uint64(1); len(ids) < 4; id++ {
		p := pipeline.PartitionOf(pipeline.ID(id), cfg.Partitions)
		if inPart[p] == 2 {
			continue
		}
		inPart[p]++
		ids, want[id] = append(ids, id), uint64(2+inPart[p])
		for i := range want[id] {
			if err := c.Publish(t.Context(), pipeline.Event{Type: pipeline.TypeView, Post: pipeline.ID(id), Tx: fmt.Sprint("v", id, "-", i)}); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Publish(t.Context(), pipeline.Event{Type: pipeline.TypeLike, UID: pipeline.ID(id), Post: liked, Tx: fmt.Sprint("l", id)}); err != nil {
			t.Fatal(err)
		}
	}
	fam, err := pipeline.Families(pipeline.DefaultFamilies()).Lookup("post")
	if err != nil {
		t.Fatal(err)
	}
	view := slices.Index(fam.Fields, "view")
	exact := func() string { // "" when every count and like is answered, and exact
		r, err := c.GetWith(t.Context(), "post", ids, client.Exact())
		if err != nil {
			return err.Error()
		}
		if len(r.Unavailable) > 0 {
			return fmt.Sprint("unavailable: ", r.Unavailable)
		}
		for i, id := range ids {
			if got := r.Counts[i][view]; got != want[id] {
				return fmt.Sprintf("post %d: %d views, want %d", id, got, want[id])
			}
			if l, err := c.Liked(t.Context(), id, liked); err != nil || !l[0] {
				return fmt.Sprintf("liked(%d, %d): %v, %v; want true", id, liked, l, err)
			}
		}
		return ""
	}
	natstest.Eventually(t, 30*time.Second, "every view counted, and a backup of a's partitions", func() (bool, string) {
		got := exact()
		return got == "" && a.Backups.Load() > 0, got
	})
	b, _ := startFirst(t, config()) // primes a standby, and then takes its share warm
	var p int
	select {
	case p = <-held:
	case <-time.After(time.Minute):
		t.Fatal("a handed no partition over")
	}
	// Held twice the readers' hand-over wait (query.DefaultHandOver, 2 s), within the TTL.
	for end := time.Now().Add(2 * query.DefaultHandOver); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if got := exact(); got != "" {
			t.Fatalf("partition %d stopping at a, its workers still running: %s", p, got)
		}
	}
	releaseNow()
	// From the giver's last answer to the taker's first, readers wait the hand-over out.
	for deadline := time.Now().Add(30 * time.Second); !slices.Contains(b.Parts(), p) || b.PartsWarm.Load() == 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("b does not own partition %d after 30 s: b owns %v", p, b.Parts())
		}
		if got := exact(); got != "" {
			t.Fatalf("partition %d handed from a to b: %s", p, got)
		}
	}
	if got := exact(); got != "" {
		t.Fatalf("after the hand-over of partition %d: %s", p, got)
	}
}

// A partition whose start failed is not started again before a pause, jittered, that
// grows with the failures in a row (a backup that cannot be read was read again 30 times a second,
// every failed start kicking the rounds); being owned elsewhere is no failure, and a
// start that works forgets the failures.
func TestFailedStartsPaced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := &Node{cfg: Config{LeaseTTL: time.Second}, retries: map[int]*startRetry{}}
		if n.retryLater(3) {
			t.Fatal("a partition never started waits")
		}
		broken := errors.New("cannot restore: a corrupt object")
		var pauses []time.Duration
		for range 8 {
			n.startDone(3, broken)
			begun := time.Now()
			for n.retryLater(3) {
				time.Sleep(10 * time.Millisecond)
			}
			pauses = append(pauses, time.Since(begun))
		}
		for _, d := range pauses { // at most 5 tries a second, where they came every 30 ms
			if d < 200*time.Millisecond || d > 10*time.Second {
				t.Fatalf("pauses %v: want each from a fifth of the TTL to 10 TTLs", pauses)
			}
		}
		n.startDone(3, ErrOwned)
		if n.retryLater(3) {
			t.Fatal("a partition owned elsewhere waits")
		}
		n.startDone(3, broken)
		n.startDone(3, nil)
		if n.retryLater(3) {
			t.Fatal("a partition that started waits")
		}
	})
}
