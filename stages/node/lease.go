package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/stages/flow"
)

// ErrOwned is returned by Start when another tallyd owns the partitions of this prefix.
var ErrOwned = errors.New("the partitions are owned by another tallyd")

// DefaultLeaseTTL is how long an ownership lease lives without renewal; it is renewed
// every third of it. A crashed owner's partitions are free this long after its last
// renewal.
const DefaultLeaseTTL = 10 * time.Second

// lease is this process's ownership of every partition of its prefix, held as a key in a
// KV bucket whose messages expire after the TTL. Until partitions can move between
// processes with their state, one tallyd owns them all: a second one refuses to start
// instead of counting the same events again from its own disk (or, as a standby, waits
// for the lease and takes the state over from NATS, see own). The key's revision is the
// fencing token: renewal is a compare-and-set on it, and an owner whose renewal fails —
// because it was paused past the TTL and another took the key — stops at once.
type lease struct {
	ttl time.Duration
	kv  jetstream.KeyValue
	key string
	id  string
	// value is what the key holds: "<node id> <host>".
	value []byte
	rev   uint64 // the last revision written; only keep's goroutine changes it
	// acquired is the revision the lease was taken at: it names this ownership.
	acquired uint64
	lost     chan struct{}
	// renewed is when the lease was last renewed (Unix ns): other goroutines check it
	// before writing to NATS on the owner's behalf (see valid).
	renewed atomic.Int64
}

// age is the time since the lease was last renewed.
func (l *lease) age() time.Duration { return time.Since(time.Unix(0, l.renewed.Load())) }

// valid reports whether the lease is certainly still ours: renewed less than a TTL ago.
func (l *lease) valid() bool { return l.age() < l.ttl }

// acquireLease takes the lease, or reports who holds it. A restart of the same data
// directory (the same node id) takes its own lease back at once.
func acquireLease(ctx context.Context, js jetstream.JetStream, bucket string, replicas int, dataDir string, ttl time.Duration) (*lease, error) {
	id, err := nodeID(dataDir)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second) // a missing permission only times out
	defer cancel()
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: bucket, Description: "Tally partition ownership", TTL: ttl, History: 1, Replicas: replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("cannot set up the ownership bucket %s: %w", bucket, err)
	}
	host, _ := os.Hostname()
	value := []byte(id + " " + host)
	l := &lease{ttl: ttl, kv: kv, key: "partitions", id: id, value: value, lost: make(chan struct{})}
	l.rev, err = kv.Create(ctx, l.key, value)
	if flow.Fenced(err) {
		e, gerr := kv.Get(ctx, l.key)
		switch {
		case gerr != nil:
			err = gerr
		case strings.HasPrefix(string(e.Value()), id+" "):
			l.rev, err = kv.Update(ctx, l.key, value, e.Revision())
		default:
			return nil, fmt.Errorf("%w: %q holds bucket %s key %s (revision %d); one tallyd owns a prefix's partitions — start this one with --standby to take over when that one stops (%v after it dies)",
				ErrOwned, string(e.Value()), bucket, l.key, e.Revision(), ttl)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("cannot take the ownership lease: %w", err)
	}
	l.renewed.Store(time.Now().UnixNano())
	l.acquired = l.rev
	return l, nil
}

// keep renews the lease until ctx ends; when a renewal finds another revision (someone
// else owns the partitions now) or cannot renew before the lease would have expired, it
// closes lost and returns.
func (l *lease) keep(ctx context.Context, log *slog.Logger) {
	tick := time.NewTicker(l.ttl / 3)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if !l.valid() {
			// Paused past the lease (a stopped process, a frozen VM): another tallyd may
			// own the partitions already. Stop before doing anything else.
			log.Error("ownership lease expired while this process was paused; stopping")
			close(l.lost)
			return
		}
		rctx, cancel := context.WithTimeout(ctx, l.ttl/3)
		rev, err := l.kv.Update(rctx, l.key, l.value, l.rev)
		cancel()
		switch {
		case err == nil:
			l.rev = rev
			l.renewed.Store(time.Now().UnixNano())
			continue
		case ctx.Err() != nil:
			return
		case flow.Fenced(err) || l.age() > l.ttl*2/3:
			// A wrong last revision means another process took the key: fenced. A lease
			// this close to expiring may be taken any moment: stop before it is.
			log.Error("ownership lease lost; stopping", "err", err)
			close(l.lost)
			return
		default:
			log.Warn("cannot renew the ownership lease yet", "err", err)
		}
	}
}

// release deletes the key so that another tallyd may start at once.
func (l *lease) release(ctx context.Context) {
	_ = l.kv.Delete(ctx, l.key, jetstream.LastRevision(l.rev))
}

// nodeID is the data directory's identity, made on first use.
func nodeID(dataDir string) (string, error) {
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
