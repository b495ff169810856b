package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// fakeKV is the ownership bucket's one key, with the faults a NATS cluster shows: an
// answer lost after the write went through, and a JetStream that answers nothing (an R3
// leader election) until it is back.
type fakeKV struct {
	jetstream.KeyValue // what the lease does not use: panics
	mu                 sync.Mutex
	val                []byte
	rev                uint64
	present            bool
	lose               int  // the next lose Updates are written, their answers lost
	down               bool // nothing is answered nor written
	latency            time.Duration
	updates            int
}

// wait blocks a call that gets no answer until its context ends.
func (f *fakeKV) wait(ctx context.Context) error {
	<-ctx.Done()
	return fmt.Errorf("nats: timeout: %w", ctx.Err())
}

func (f *fakeKV) isDown() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.down
}

func (f *fakeKV) Create(ctx context.Context, key string, value []byte, _ ...jetstream.KVCreateOpt) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.present {
		return 0, jetstream.ErrKeyExists
	}
	f.val, f.present = value, true
	f.rev += 10 // revisions are stream sequences: other keys' writes come between
	return f.rev, nil
}

func (f *fakeKV) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	if f.isDown() {
		return 0, f.wait(ctx)
	}
	time.Sleep(f.latency) // the round trip (a fake clock: no real sleep)
	f.mu.Lock()
	f.updates++
	if !f.present || last != f.rev {
		f.mu.Unlock()
		return 0, fmt.Errorf("%w: %w", &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence,
			Description: fmt.Sprintf("wrong last sequence: %d", f.rev)}, jetstream.ErrKeyRevisionMismatch)
	}
	f.val = value
	f.rev += 10
	rev, lost := f.rev, f.lose > 0
	if lost {
		f.lose--
	}
	f.mu.Unlock()
	if lost {
		return 0, f.wait(ctx)
	}
	return rev, nil
}

func (f *fakeKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	if f.isDown() {
		return nil, f.wait(ctx)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.present {
		return nil, jetstream.ErrKeyNotFound
	}
	return entry{key: key, val: f.val, rev: f.rev}, nil
}

func (f *fakeKV) Status(context.Context) (jetstream.KeyValueStatus, error) {
	return &jetstream.KeyValueBucketStatus{}, nil
}

func (f *fakeKV) Delete(ctx context.Context, key string, _ ...jetstream.KVDeleteOpt) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.present = false
	return nil
}

type entry struct {
	key string
	val []byte
	rev uint64
}

func (e entry) Bucket() string                  { return "OWNERS" }
func (e entry) Key() string                     { return e.key }
func (e entry) Value() []byte                   { return e.val }
func (e entry) Revision() uint64                { return e.rev }
func (e entry) Created() time.Time              { return time.Time{} }
func (e entry) Delta() uint64                   { return 0 }
func (e entry) Operation() jetstream.KeyValueOp { return jetstream.KeyValuePut }

func fakeLease(t *testing.T, kv *fakeKV, ttl time.Duration) *Lease {
	t.Helper()
	o := &Owners{kv: kv, id: "n1", value: []byte("n1 host"), ttl: ttl}
	l, err := o.Take(t.Context(), "counters.0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// A renewal whose answer was lost went through: the next renewal finds the revision
// moved, reads the key, sees its own lease there and adopts the revision instead of
// taking it for fencing (which stopped the owner against its own write).
func TestLeaseRenewalAnswerLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 10 * time.Second
		kv := &fakeKV{}
		l := fakeLease(t, kv, ttl)
		kv.lose = 1
		if err := l.Renew(t.Context()); errors.Is(err, ErrLost) {
			t.Fatalf("renewal without an answer: %v", err)
		}
		for i := range 10 {
			time.Sleep(ttl / 5)
			if err := l.Renew(t.Context()); err != nil {
				t.Fatalf("renewal %d after a lost answer: %v", i, err)
			}
			if !l.Valid() {
				t.Fatalf("renewal %d: the lease is not valid", i)
			}
		}
		if l.rev != kv.rev {
			t.Fatalf("lease at revision %d, the key at %d", l.rev, kv.rev)
		}
	})
}

// The adopted renewal counts from when the first unanswered renewal was sent, not from
// when its answer would have come: the server's TTL may have started then.
func TestLeaseAdoptedCountsFromFirstTry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 9 * time.Second
		kv := &fakeKV{}
		l := fakeLease(t, kv, ttl)
		time.Sleep(time.Second)
		first := time.Now()
		kv.lose = 1
		if err := l.Renew(t.Context()); err != nil { // written, unanswered for ttl/3, adopted
			t.Fatal(err)
		}
		if got := l.Age(); got != time.Since(first) || got == 0 {
			t.Fatalf("age %v after adopting, want %v (since the renewal was sent)", got, time.Since(first))
		}
	})
}

// While JetStream answers nothing (a leader election), renewals are retried for as long
// as the lease lasts: the owner keeps what it owns if JetStream is back in time, and
// gives it up exactly when the lease is over otherwise.
func TestLeaseRenewalRetriedUntilTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 10 * time.Second
		kv := &fakeKV{}
		l := fakeLease(t, kv, ttl)
		ctx := t.Context()
		kv.mu.Lock()
		kv.down = true
		kv.mu.Unlock()
		start := time.Now()
		for time.Since(start) < 8*time.Second { // the old renewal gave up at 2/3 of the TTL
			if err := l.Renew(ctx); errors.Is(err, ErrLost) {
				t.Fatalf("lease lost %v into an election of a %v lease: %v", time.Since(start), ttl, err)
			}
			time.Sleep(ttl / 5)
		}
		kv.mu.Lock()
		kv.down = false
		kv.mu.Unlock()
		if err := l.Renew(ctx); err != nil || !l.Valid() {
			t.Fatalf("renewal once JetStream is back: %v (valid %v)", err, l.Valid())
		}

		kv.mu.Lock()
		kv.down = true
		kv.mu.Unlock()
		renewed := time.Now()
		var err error
		for !errors.Is(err, ErrLost) {
			if !l.Valid() && time.Since(renewed) < ttl {
				t.Fatalf("invalid %v after the last renewal, before the TTL", time.Since(renewed))
			}
			err = l.Renew(ctx)
			if !errors.Is(err, ErrLost) {
				time.Sleep(ttl / 5)
			}
		}
		if d := time.Since(renewed); d < ttl || d > ttl+ttl/5 {
			t.Fatalf("lost %v after the last renewal, want the TTL %v", d, ttl)
		}
		if l.Valid() {
			t.Fatal("valid after the TTL")
		}
	})
}

// A renewal that finds the key held by another, or gone, reports the lease lost.
func TestLeaseRenewalFenced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		kv := &fakeKV{}
		l := fakeLease(t, kv, 10*time.Second)
		// Another run of the same node id took the key: same node id, another lease.
		kv.mu.Lock()
		kv.val, kv.rev = []byte("n1 host other"), kv.rev+10
		kv.mu.Unlock()
		if err := l.Renew(t.Context()); !errors.Is(err, ErrLost) {
			t.Fatalf("renewal of a key held by another run: %v, want ErrLost", err)
		}
		l = fakeLease(t, &fakeKV{}, 10*time.Second)
		_ = l.kv.Delete(t.Context(), l.key)
		if err := l.Renew(t.Context()); !errors.Is(err, ErrLost) {
			t.Fatalf("renewal of a deleted key: %v, want ErrLost", err)
		}
	})
}

// A lease counts its age on the monotonic clock from when its renewal was sent: the
// round trip does not lengthen it, and (outside the fake clock) the time it keeps has a
// monotonic reading, so a step of the wall clock changes nothing.
func TestLeaseAgeMonotonic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 10 * time.Second
		kv := &fakeKV{latency: time.Second}
		l := fakeLease(t, kv, ttl)
		time.Sleep(3 * time.Second)
		sent := time.Now()
		if err := l.Renew(t.Context()); err != nil {
			t.Fatal(err)
		}
		if got, want := l.Age(), time.Since(sent); got != want {
			t.Fatalf("age %v, want %v (since the renewal was sent, not answered)", got, want)
		}
		time.Sleep(ttl - time.Second - time.Nanosecond)
		if !l.Valid() {
			t.Fatal("invalid before the TTL")
		}
		time.Sleep(time.Nanosecond)
		if l.Valid() {
			t.Fatal("valid a TTL after the renewal was sent")
		}
	})
	// Inside a synctest bubble time.Now has no monotonic reading: look at a real one.
	l := fakeLease(t, &fakeKV{}, time.Minute)
	if s := l.renewed.Load().String(); !strings.Contains(s, " m=") {
		t.Fatalf("the lease's renewal time %s has no monotonic reading", s)
	}
	if err := l.Renew(t.Context()); err != nil {
		t.Fatal(err)
	}
	if s := l.renewed.Load().String(); !strings.Contains(s, " m=") {
		t.Fatalf("the lease's renewal time %s has no monotonic reading", s)
	}
	if !bytes.HasPrefix(l.value, []byte("n1 host ")) {
		t.Fatalf("lease value %q", l.value)
	}
}
