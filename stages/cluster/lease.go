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
