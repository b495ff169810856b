package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/tally-dev/tally/stages/flow"
)

// DefaultLeaseTTL is how long an ownership lease lives without renewal; it is renewed
// five times within it. A crashed owner's partitions are free this long after its last
// renewal, and taken over within a fifth more: short enough for every partition to answer
// within 3 s of a crash, long enough for a renewal to ride out a NATS leader election.
const DefaultLeaseTTL = 2 * time.Second

// memberPrefix starts the ownership bucket's key of each live process; the others are
// leases, named by their users (a partition's: counters.<p>).
const memberPrefix = "members."

// lease is this process's ownership of one key of the ownership bucket, whose messages
// expire after the TTL. The key's revision is the fencing token: a renewal is a
// compare-and-set on it, and an owner whose renewal fails — because it was paused past
// the TTL and another process took the key — gives up what the key stands for at once.
type Lease struct {
	ttl   time.Duration
	kv    jetstream.KeyValue
	key   string
	id    string // the node id
	value []byte // "<node id> <host> <nonce>": this lease's, not another run's of the same node
	mu    sync.Mutex
	rev   uint64 // the last revision written, under mu: a renewal and a release may race
	// tried is when the first renewal not answered yet was sent (zero when none), under
	// mu: should one of those have gone through, its TTL started after this.
	tried time.Time
	// acquired is the revision the lease was taken at: it names this ownership. Revisions
	// are ordered within one incarnation of the bucket: epoch is when it was made (Unix
	// ns), so that a bucket deleted and made again does not compare its revisions, which
	// start over, with the old ones (see pointer).
	acquired uint64
	epoch    int64
	// renewed is when the last renewal that went through was sent, as time.Now gave it:
	// other goroutines check it before acting on the owner's behalf (see valid). It keeps
	// its monotonic clock reading, so a step of the wall clock neither ends a lease early
	// nor stretches it past the server's TTL.
	renewed  atomic.Pointer[time.Time]
	released atomic.Bool
}

// Key is the lease's key in the ownership bucket.
func (l *Lease) Key() string { return l.key }

// ID is the node id of the lease's owner.
func (l *Lease) ID() string { return l.id }

// Acquired is the revision the lease was taken at, which names this ownership; Epoch
// tells the bucket incarnation it is of (see the fields).
func (l *Lease) Acquired() uint64 { return l.acquired }

// Epoch is when the ownership bucket the lease is in was made (Unix ns).
func (l *Lease) Epoch() int64 { return l.epoch }

// Age is the time since the last renewal that went through was sent (monotonic).
func (l *Lease) Age() time.Duration { return time.Since(*l.renewed.Load()) }

// Valid reports whether the lease is certainly still ours: renewed less than a TTL ago
// and not released.
func (l *Lease) Valid() bool { return !l.released.Load() && l.Age() < l.ttl }

// Token names this ownership: the node id and the revision it was taken at.
func (l *Lease) Token() string { return fmt.Sprintf("%s.%d", l.id, l.acquired) }

// Owners is the ownership bucket as seen by one process: its leases and the live
// processes (members), each renewing its own key, which expires after the TTL.
type Owners struct {
	kv    jetstream.KeyValue
	st    jetstream.Stream // the bucket's stream, whose subjects list the keys (see keys)
	id    string
	value []byte
	ttl   time.Duration
	// warmth is what the membership says of this process's standbys (see SetWarm),
	// written with every Register.
	mu       sync.Mutex
	warmth   string
	priming  string // what the membership says of the standbys priming here (SetPriming)
	stopping string // what the membership says of the partitions stopping here (SetStopping)
	refused  string // what it says of the partitions this process cannot start (SetRefused)
	leaving  bool
	seen     map[string]bool // the members the last View found
}

// Open opens (or makes) the ownership bucket b with the TTL ttl (see openOwners), as the
// process whose node id is kept in dataDir.
func Open(ctx context.Context, js jetstream.JetStream, b Bucket, dataDir string, ttl time.Duration) (*Owners, error) {
	id, err := NodeID(dataDir)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second) // a missing permission only times out
	defer cancel()
	kv, err := openOwners(ctx, js, b, ttl)
	if errors.Is(err, ErrBucketConfig) {
		return nil, err
	} else if err != nil {
		return nil, fmt.Errorf("cannot set up the ownership bucket %s: %w", b.Name, err)
	}
	st, err := js.Stream(ctx, "KV_"+kv.Bucket())
	if err != nil {
		return nil, fmt.Errorf("cannot set up the ownership bucket %s: %w", b.Name, err)
	}
	host, _ := os.Hostname()
	return &Owners{kv: kv, st: st, id: id, value: []byte(id + " " + host), ttl: ttl}, nil
}

// ID is this process's node id.
func (o *Owners) ID() string { return o.id }

// Register writes (or renews) this process's membership, with what SetWarm said last.
func (o *Owners) Register(ctx context.Context) error {
	o.mu.Lock()
	v := append(slices.Clone(o.value), o.warmth...)
	v = append(v, o.priming...)
	v = append(v, o.stopping...)
	v = append(v, o.refused...)
	if o.leaving {
		v = append(v, " leaving"...)
	}
	o.mu.Unlock()
	_, err := o.kv.Put(ctx, memberPrefix+o.id, v)
	return err
}

// SetWarm says, from the next Register on, that this process keeps standbys and which
// of them are warm (ready and caught up): the others hold a partition back from it
// until its standby of the partition is (see Effective). A process that never says so
// (no standbys, or an older version) is handed its partitions at once, cold.
func (o *Owners) SetWarm(ready []int) {
	b := appendList([]byte(" standbys="), ready)
	o.mu.Lock()
	o.warmth = string(b)
	o.mu.Unlock()
}

// SetPriming says, from the next Register on, which of this process's standbys are on
// their way to warm: restoring a backup, waiting for their turn to (one at a time), or
// loading their tables. A holder does not count that time against its patience with a
// partition due to move here (see View.Priming): it grows with the partition's state,
// and a move that lost patience meanwhile was a cold one, the partition unanswered for
// the minutes its restore took.
func (o *Owners) SetPriming(ps []int) { o.say(&o.priming, "priming", ps) }

// SetStopping says, from the next Register on, which partitions are still stopping in
// this process, their leases gone: it cannot start them again until they have stopped,
// which may take long (a last checkpoint behind Badger's compactions), so the others do
// not leave them to it as their last owner (see View.Stopping).
func (o *Owners) SetStopping(ps []int) { o.say(&o.stopping, "stopping", ps) }

// SetRefused says, from the next Register on, which partitions this process cannot
// start because their state backup cannot be read (ErrDamagedBackup): their last owner,
// which keeps their state, is given them over its share if need be (see
// Said.Refused).
func (o *Owners) SetRefused(ps []int) { o.say(&o.refused, "refused", ps) }

// say sets *word, one of the membership's words, to name=ps, or to nothing when ps is
// empty.
func (o *Owners) say(word *string, name string, ps []int) {
	var b []byte
	if len(ps) > 0 {
		b = appendList([]byte(" "+name+"="), ps)
	}
	o.mu.Lock()
	*word = string(b)
	o.mu.Unlock()
}

func appendList(b []byte, ps []int) []byte {
	for i, p := range ps {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(p), 10)
	}
	return b
}

// SetLeaving says, from the next Register on, that this process is stopping: the others
// assign its partitions among themselves (it is no longer one of View.Members) but
// leave each with it until its next owner's standby of it is warm (View.Leaving).
func (o *Owners) SetLeaving() {
	o.mu.Lock()
	o.leaving = true
	o.mu.Unlock()
}

// View is the ownership bucket as read by one round of the assignment.
type View struct {
	Members []string          // live, sorted, this process among them unless it is leaving
	Leaving []string          // live but stopping (SetLeaving): they hold, and are assigned nothing
	Holders map[string]string // each lease key's holder (its node id)
	Said
}

// Said is what the live processes say of partitions in their memberships, each a set of
// partitions by node id.
type Said struct {
	// Warm names, for each member that keeps standbys, the partitions whose standby there
	// is warm; a member that keeps none (or does not say) has no entry.
	Warm map[string]map[int]bool
	// Priming names, for each member, the partitions whose standby there is on its way
	// to warm (SetPriming).
	Priming map[string]map[int]bool
	// Stopping names, for each live process, the partitions it is still stopping
	// (SetStopping): not its to start again until they have stopped.
	Stopping map[string]map[int]bool
	// Refused names, for each live process, the partitions it cannot start, their
	// backup unreadable (SetRefused): their last owner alone can.
	Refused map[string]map[int]bool
}

// Live is Members and Leaving: the processes whose leases are theirs still.
func (v View) Live() []string { return append(slices.Clone(v.Members), v.Leaving...) }

// member is what a membership value says besides who and where (see Register).
type member struct {
	warm              map[int]bool // nil when it says nothing of its standbys (SetWarm)
	priming, stopping map[int]bool // SetPriming, SetStopping
	refused           map[int]bool // SetRefused
	leaving           bool
}

// memberOf reads a membership value. What it does not know it passes over: a newer
// version's words.
func memberOf(v []byte) member {
	var m member
	fs := strings.Fields(string(v)) // "<id> <host> [standbys=<p>,<p>…] [priming=<p>,…] [stopping=<p>,…] [refused=<p>,…] [leaving]"
	for _, f := range fs[min(2, len(fs)):] {
		key, list, _ := strings.Cut(f, "=")
		switch key {
		case "leaving":
			m.leaving = true
		case "standbys":
			m.warm = parseList(list)
		case "priming":
			m.priming = parseList(list)
		case "stopping":
			m.stopping = parseList(list)
		case "refused":
			m.refused = parseList(list)
		}
	}
	return m
}

func parseList(list string) map[int]bool {
	ps := map[int]bool{}
	for s := range strings.SplitSeq(list, ",") {
		if p, err := strconv.Atoi(s); err == nil {
			ps[p] = true
		}
	}
	return ps
}

// Leave deletes this process's membership: the others plan without it from their next
// round.
func (o *Owners) Leave(ctx context.Context) error { return o.kv.Delete(ctx, memberPrefix+o.id) }

// Snapshot reads the live members (sorted, this process among them) and the holder of
// every lease key (its node id).
func (o *Owners) Snapshot(ctx context.Context) (members []string, holders map[string]string, err error) {
	v, err := o.View(ctx)
	return v.Members, v.Holders, err
}

// View reads the live members, what each says of its standbys, and the holder of every
// lease key: those listed, and those of leases (each read whether listed or not). A
// listing of a bucket whose keys are being renewed can miss some (the watch behind it
// ends before a key renewed meanwhile comes round again), and a member or a holder
// missed would change the assignment: the members seen before are read again too.
func (o *Owners) View(ctx context.Context, leases ...string) (View, error) {
	keys, err := o.keys(ctx, "")
	if err != nil {
		return View{}, fmt.Errorf("cannot list the live processes: %w", err)
	}
	o.mu.Lock()
	for id := range o.seen {
		keys = append(keys, memberPrefix+id)
	}
	o.mu.Unlock()
	keys = append(keys, leases...)
	slices.Sort(keys)
	keys = slices.Compact(keys)
	entries, errs := o.getAll(ctx, keys)
	v := View{Holders: map[string]string{}, Said: Said{Warm: map[string]map[int]bool{}, Priming: map[string]map[int]bool{}, Stopping: map[string]map[int]bool{}, Refused: map[string]map[int]bool{}}}
	seen := map[string]bool{}
	for i, k := range keys {
		e, err := entries[i], errs[i]
		if id, ok := strings.CutPrefix(k, memberPrefix); ok {
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				continue // expired, or left
			} else if err != nil { // not knowing what it says would plan as if it kept no standbys
				return View{}, fmt.Errorf("cannot read the membership %s: %w", k, err)
			}
			seen[id] = true
			m := memberOf(e.Value())
			if m.warm != nil {
				v.Warm[id] = m.warm
			}
			if m.priming != nil {
				v.Priming[id] = m.priming
			}
			if m.stopping != nil {
				v.Stopping[id] = m.stopping
			}
			if m.refused != nil {
				v.Refused[id] = m.refused
			}
			if m.leaving || id == o.id && o.isLeaving() {
				v.Leaving = append(v.Leaving, id)
			} else {
				v.Members = append(v.Members, id)
			}
			continue
		}
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil: // a lease taken for free would move the partition
			return View{}, fmt.Errorf("cannot read the lease %s: %w", k, err)
		default:
			v.Holders[k], _, _ = strings.Cut(string(e.Value()), " ")
		}
	}
	o.mu.Lock()
	o.seen = seen
	o.mu.Unlock()
	if !o.isLeaving() && !slices.Contains(v.Members, o.id) {
		v.Members = append(v.Members, o.id)
	}
	slices.Sort(v.Members)
	slices.Sort(v.Leaving)
	return v, nil
}

// keys lists the bucket's keys that start with prefix, deleted ones among them (a
// read then finds them gone), in one request: the subjects of the bucket's stream. The
// bucket's own listing (KeyValue.Keys), used when the stream is not known, makes a
// consumer for each, which took a round most of its time.
func (o *Owners) keys(ctx context.Context, prefix string) ([]string, error) {
	if o.st == nil {
		keys, err := o.kv.Keys(ctx)
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			return nil, nil
		}
		return slices.DeleteFunc(keys, func(k string) bool { return !strings.HasPrefix(k, prefix) }), err
	}
	subj := "$KV." + o.kv.Bucket() + "."
	info, err := o.st.Info(ctx, jetstream.WithSubjectFilter(subj+prefix+">"))
	if err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(info.State.Subjects))
	for s := range info.State.Subjects {
		keys = append(keys, strings.TrimPrefix(s, subj))
	}
	return keys, nil
}

// viewReads is how many keys a View reads at once.
const viewReads = 16

// getAll reads keys at once, up to viewReads at a time: a round reads every lease and
// membership, and one read after another took hundreds of milliseconds under load, which
// a hand-over waited for (the next owner's round starts when the lease is let go).
func (o *Owners) getAll(ctx context.Context, keys []string) ([]jetstream.KeyValueEntry, []error) {
	entries, errs := make([]jetstream.KeyValueEntry, len(keys)), make([]error, len(keys))
	sem := make(chan struct{}, viewReads)
	var wg sync.WaitGroup
	for i, k := range keys {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			entries[i], errs[i] = o.kv.Get(ctx, k)
		})
	}
	wg.Wait()
	return entries, errs
}

func (o *Owners) isLeaving() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.leaving
}

// Changes calls changed whenever a lease is let go or a membership says something new
// (a process joined, is leaving, or its warm standbys changed), or a lease or a
// membership expired (the marker the server leaves, see expiryMarkerTTL; a bucket on a
// server before 2.11 says nothing of it) until ctx ends: a hand-over or a takeover
// waiting on either need not wait for the next round. Renewals that change nothing call
// nothing.
func (o *Owners) Changes(ctx context.Context, changed func()) error {
	w, err := o.kv.WatchAll(ctx, jetstream.UpdatesOnly())
	if err != nil {
		return fmt.Errorf("cannot watch the ownership bucket: %w", err)
	}
	defer w.Stop()
	said := map[string]string{} // each membership's last value
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("the watch of the ownership bucket ended")
			}
			if e == nil {
				continue
			}
			k := e.Key()
			switch {
			case e.Operation() != jetstream.KeyValuePut:
				delete(said, k)
				changed()
			case strings.HasPrefix(k, memberPrefix) && said[k] != string(e.Value()):
				said[k] = string(e.Value())
				changed()
			}
		}
	}
}

// Alone reports ErrOwned when another process is live on the prefix (its membership
// not expired): this one's own id, restarted, does not count.
func (o *Owners) Alone(ctx context.Context) error {
	keys, err := o.keys(ctx, memberPrefix)
	if err != nil {
		return fmt.Errorf("cannot list the live processes: %w", err)
	}
	for _, k := range keys {
		if id, ok := strings.CutPrefix(k, memberPrefix); ok && id != o.id {
			e, err := o.kv.Get(ctx, k)
			if err == nil {
				return fmt.Errorf("%w: %q is live", ErrOwned, e.Value())
			}
		}
	}
	return nil
}

// Holder is the node id holding lease key k ("" when none, or it cannot be read: the
// assignment then plans as if it were free, and the lease decides).
func (o *Owners) Holder(ctx context.Context, k string) string {
	e, err := o.kv.Get(ctx, k)
	if err != nil {
		return ""
	}
	id, _, _ := strings.Cut(string(e.Value()), " ")
	return id
}

// Take takes the lease on key, or reports who holds it (wrapping ErrOwned). A restart
// of the same data directory (the same node id) takes its own lease back at once.
func (o *Owners) Take(ctx context.Context, key string) (*Lease, error) {
	l := &Lease{ttl: o.ttl, kv: o.kv, key: key, id: o.id, value: fmt.Appendf(nil, "%s %s", o.value, nuid.Next())}
	// The key's TTL runs from when the server stores it, which is after this: counting
	// from here errs on the side of a shorter lease.
	sent := time.Now()
	var err error
	l.rev, err = o.kv.Create(ctx, key, l.value)
	if flow.Fenced(err) {
		e, gerr := o.kv.Get(ctx, key)
		switch {
		case errors.Is(gerr, jetstream.ErrKeyNotFound): // expired in between
			l.rev, err = o.kv.Create(ctx, key, l.value)
		case gerr != nil:
			err = gerr
		case strings.HasPrefix(string(e.Value()), o.id+" "):
			l.rev, err = o.kv.Update(ctx, key, l.value, e.Revision())
		default:
			return nil, fmt.Errorf("%w: %q holds key %s (revision %d)", ErrOwned, string(e.Value()), key, e.Revision())
		}
	}
	if err != nil {
		if flow.Fenced(err) {
			return nil, fmt.Errorf("%w: key %s was taken meanwhile", ErrOwned, key)
		}
		return nil, fmt.Errorf("cannot take the lease %s: %w", key, err)
	}
	l.renewed.Store(&sent)
	l.acquired = l.rev
	if l.epoch, err = o.epoch(ctx); err != nil {
		l.Release(ctx)
		return nil, fmt.Errorf("cannot take the lease %s: %w", key, err)
	}
	return l, nil
}

// epoch is when the ownership bucket was made (Unix ns).
func (o *Owners) epoch(ctx context.Context) (int64, error) {
	st, err := o.kv.Status(ctx)
	if err != nil {
		return 0, fmt.Errorf("cannot read the ownership bucket: %w", err)
	}
	if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok && bs.StreamInfo() != nil {
		return bs.StreamInfo().Created.UnixNano(), nil
	}
	return 0, nil
}

// Renew extends the lease by one compare-and-set. It returns ErrLost when the lease
// was paused past its TTL or not renewed within it (another process may hold it already:
// give up before doing anything else), or when the key is found held by another or gone;
// other errors are worth retrying. A renewal whose answer was lost (a timeout, an R3
// leader election) may have gone through: the key then holds this lease's value at a
// newer revision, which is adopted rather than taken for fencing.
func (l *Lease) Renew(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released.Load() {
		return nil
	}
	if !l.Valid() {
		return fmt.Errorf("%w: %s not renewed for %v (paused past its TTL)", ErrLost, l.key, l.Age().Round(time.Millisecond))
	}
	wait := min(l.ttl/3, l.ttl-l.Age()) // no answer counts once the lease is over
	rctx, cancel := context.WithTimeout(ctx, wait)
	sent := time.Now() // see take
	if l.tried.IsZero() {
		l.tried = sent
	}
	rev, err := l.kv.Update(rctx, l.key, l.value, l.rev)
	cancel()
	switch {
	case err == nil:
		l.renewed.Store(&sent)
		l.rev, l.tried = rev, time.Time{}
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	}
	if !l.Valid() { // no answer within the lease: others see it over already
		return fmt.Errorf("%w: %s not renewed within its TTL %v: %w", ErrLost, l.key, l.ttl, err)
	}
	// Lost answer or moved revision: what the key holds tells which.
	gctx, cancel := context.WithTimeout(ctx, min(l.ttl/3, l.ttl-l.Age()))
	e, gerr := l.kv.Get(gctx, l.key)
	cancel()
	switch {
	case errors.Is(gerr, jetstream.ErrKeyNotFound):
		return fmt.Errorf("%w: %s is gone (deleted or expired): %w", ErrLost, l.key, err)
	case gerr != nil:
		return fmt.Errorf("%w (and cannot read the key: %w)", err, gerr)
	case !bytes.Equal(e.Value(), l.value):
		return fmt.Errorf("%w: %s is held by %q (revision %d): %w", ErrLost, l.key, e.Value(), e.Revision(), err)
	case e.Revision() > l.rev:
		// A renewal of ours went through though its answer was lost. Which one is not
		// known: its TTL started after the first of them was sent.
		first := l.tried
		l.renewed.Store(&first)
		l.rev, l.tried = e.Revision(), time.Time{}
		return nil
	}
	return err // not written (a stale read shows no more): retried until the TTL runs out
}

// Every calls fn every d until ctx ends (nil) or fn fails (its error).
func Every(ctx context.Context, d time.Duration, fn func() error) error {
	tick := time.NewTicker(d)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if err := fn(); err != nil {
			return err
		}
	}
}

// Paced calls fn every d, as Every does, but never more than a share of the time: after
// a call that took t it waits at least rest×t, so a call takes at most 1/(rest+1) of
// the time however slow it gets. Every, with calls slower than d, runs them back to
// back. It returns nil when ctx ends, or fn's error.
func Paced(ctx context.Context, d time.Duration, rest int, fn func() error) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		start := time.Now()
		if err := fn(); err != nil {
			return err
		}
		took := time.Since(start)
		timer.Reset(max(d-took, time.Duration(rest)*took))
	}
}

// Release deletes the key so that another process may take it at once; nothing may be
// done on the lease's behalf afterwards (a backup would overwrite the next owner's).
func (l *Lease) Release(ctx context.Context) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.released.Store(true)
	err := l.kv.Delete(ctx, l.key, jetstream.LastRevision(l.rev))
	if flow.Fenced(err) { // a renewal whose answer was lost went through: still ours?
		if e, gerr := l.kv.Get(ctx, l.key); gerr == nil && bytes.Equal(e.Value(), l.value) {
			_ = l.kv.Delete(ctx, l.key, jetstream.LastRevision(e.Revision()))
		}
	}
}

// NodeID is the data directory's identity, made on first use.
func NodeID(dataDir string) (string, error) {
	path := filepath.Join(dataDir, "node-id")
	b, err := os.ReadFile(path)
	if err == nil && len(strings.TrimSpace(string(b))) > 0 {
		return strings.TrimSpace(string(b)), nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("cannot read the node id: %w", err)
	}
	var r [8]byte
	_, _ = rand.Read(r[:])
	id := hex.EncodeToString(r[:])
	if err := os.WriteFile(path, []byte(id+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("cannot write the node id: %w", err)
	}
	return id, nil
}
