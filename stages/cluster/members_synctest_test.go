package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ttlKV is an ownership bucket of many keys whose writes expire after a TTL, on the
// fake clock of a synctest bubble.
type ttlKV struct {
	jetstream.KeyValue // what membership does not use: panics
	ttl                time.Duration
	mu                 sync.Mutex
	rev                uint64
	keys               map[string]ttlEntry
	unanswered         string // a key whose reads get no answer (its stream electing a leader)
}

type ttlEntry struct {
	val     []byte
	rev     uint64
	expires time.Time
}

func (f *ttlKV) live(key string) (ttlEntry, bool) {
	e, ok := f.keys[key]
	return e, ok && time.Now().Before(e.expires)
}

func (f *ttlKV) put(key string, value []byte) uint64 {
	f.rev++
	f.keys[key] = ttlEntry{val: value, rev: f.rev, expires: time.Now().Add(f.ttl)}
	return f.rev
}

func (f *ttlKV) Put(_ context.Context, key string, value []byte) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.put(key, value), nil
}

func (f *ttlKV) Create(_ context.Context, key string, value []byte, _ ...jetstream.KVCreateOpt) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.live(key); ok {
		return 0, jetstream.ErrKeyExists
	}
	return f.put(key, value), nil
}

func (f *ttlKV) Update(_ context.Context, key string, value []byte, last uint64) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e, ok := f.live(key); !ok || e.rev != last {
		return 0, jetstream.ErrKeyExists
	}
	return f.put(key, value), nil
}

func (f *ttlKV) Get(_ context.Context, key string) (jetstream.KeyValueEntry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if key == f.unanswered {
		return nil, fmt.Errorf("nats: timeout: %w", context.DeadlineExceeded)
	}
	e, ok := f.live(key)
	if !ok {
		return nil, jetstream.ErrKeyNotFound
	}
	return entry{key: key, val: e.val, rev: e.rev}, nil
}

func (f *ttlKV) Keys(context.Context, ...jetstream.WatchOpt) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for k := range f.keys {
		if _, ok := f.live(k); ok {
			out = append(out, k)
		}
	}
	if len(out) == 0 {
		return nil, jetstream.ErrNoKeysFound
	}
	return out, nil
}

func (f *ttlKV) Delete(_ context.Context, key string, _ ...jetstream.KVDeleteOpt) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.keys, key)
	return nil
}

func (f *ttlKV) Status(context.Context) (jetstream.KeyValueStatus, error) {
	return &jetstream.KeyValueBucketStatus{}, nil
}

// A second process refuses to start alone while the first's membership is live, and
// may once it has expired (the first died) or the first left; a snapshot lists the live
// members, sorted, and who holds each lease.
func TestMembership(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 2 * time.Second
		kv := &ttlKV{ttl: ttl, keys: map[string]ttlEntry{}}
		a := &Owners{kv: kv, id: "b-node", value: []byte("b-node host"), ttl: ttl}
		b := &Owners{kv: kv, id: "a-node", value: []byte("a-node host"), ttl: ttl}
		ctx := t.Context()
		if err := b.Alone(ctx); err != nil {
			t.Fatalf("alone on an empty bucket: %v", err)
		}
		if err := a.Register(ctx); err != nil {
			t.Fatal(err)
		}
		if err := b.Alone(ctx); !errors.Is(err, ErrOwned) {
			t.Fatalf("alone beside a live member: %v, want ErrOwned", err)
		}
		if err := a.Alone(ctx); err != nil {
			t.Fatalf("a member restarted is alone with itself: %v", err)
		}
		l, err := a.Take(ctx, "counters.3")
		if err != nil {
			t.Fatal(err)
		}
		members, holders, err := b.Snapshot(ctx)
		if err != nil || !slices.Equal(members, []string{"a-node", "b-node"}) || holders["counters.3"] != "b-node" || len(holders) != 1 {
			t.Fatalf("snapshot: members %v, holders %v, %v", members, holders, err)
		}
		// What a member says of its standbys: none said, none kept; warm ones listed.
		if v, _ := b.View(ctx); v.Warm["b-node"] != nil {
			t.Fatalf("a member that never said it keeps standbys: warm %v", v.Warm)
		}
		a.SetWarm(nil)
		if err := a.Register(ctx); err != nil {
			t.Fatal(err)
		}
		if v, _ := b.View(ctx); v.Warm["b-node"] == nil || len(v.Warm["b-node"]) != 0 {
			t.Fatalf("a member keeping standbys, none warm: warm %v", v.Warm)
		}
		a.SetWarm([]int{1, 12})
		if err := a.Register(ctx); err != nil {
			t.Fatal(err)
		}
		if v, _ := b.View(ctx); len(v.Warm) != 1 || len(v.Warm["b-node"]) != 2 || !v.Warm["b-node"][1] || !v.Warm["b-node"][12] {
			t.Fatalf("a member with standbys of 1 and 12 warm: warm %v", v.Warm)
		}
		// And those on their way to warm.
		a.SetPriming([]int{4})
		if err := a.Register(ctx); err != nil {
			t.Fatal(err)
		}
		if v, _ := b.View(ctx); len(v.Priming) != 1 || len(v.Priming["b-node"]) != 1 || !v.Priming["b-node"][4] || len(v.Warm["b-node"]) != 2 {
			t.Fatalf("a member with standbys of 1 and 12 warm and of 4 priming: warm %v, priming %v", v.Warm, v.Priming)
		}
		a.SetPriming(nil)
		if err := a.Register(ctx); err != nil {
			t.Fatal(err)
		}
		if v, _ := b.View(ctx); len(v.Priming) != 0 {
			t.Fatalf("a member with no standby priming: priming %v", v.Priming)
		}
		// A member leaving still holds what it holds, and is assigned nothing.
		a.SetLeaving()
		if err := a.Register(ctx); err != nil {
			t.Fatal(err)
		}
		if err := b.Register(ctx); err != nil {
			t.Fatal(err)
		}
		for _, o := range []*Owners{a, b} {
			if v, _ := o.View(ctx, "counters.3"); !slices.Equal(v.Members, []string{"a-node"}) || !slices.Equal(v.Leaving, []string{"b-node"}) ||
				v.Holders["counters.3"] != "b-node" || !slices.Equal(v.Live(), []string{"a-node", "b-node"}) {
				t.Fatalf("%s's view with b-node leaving: members %v, leaving %v, holders %v", o.id, v.Members, v.Leaving, v.Holders)
			}
		}
		a.mu.Lock()
		a.leaving = false // as a new process of the same data directory
		a.mu.Unlock()
		// a renews its membership and lease within the TTL, then dies.
		time.Sleep(ttl / 2)
		if err := a.Register(ctx); err != nil {
			t.Fatal(err)
		}
		if err := l.Renew(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(ttl - time.Millisecond)
		if err := b.Alone(ctx); !errors.Is(err, ErrOwned) {
			t.Fatalf("alone just before the membership expires: %v", err)
		}
		time.Sleep(2 * time.Millisecond)
		if err := b.Alone(ctx); err != nil {
			t.Fatalf("alone once the membership expired: %v", err)
		}
		if members, holders, _ := b.Snapshot(ctx); !slices.Equal(members, []string{"a-node"}) || len(holders) != 0 {
			t.Fatalf("snapshot after the TTL: members %v, holders %v", members, holders)
		}
		if _, err := b.Take(ctx, "counters.3"); err != nil {
			t.Fatalf("taking an expired lease: %v", err)
		}
		if err := b.Register(ctx); err != nil {
			t.Fatal(err)
		}
		if err := b.Leave(ctx); err != nil {
			t.Fatal(err)
		}
		if err := a.Alone(ctx); err != nil {
			t.Fatalf("alone after the other left: %v", err)
		}
	})
}

// TestSnapshotOfAnUnreadHolder: a lease whose holder cannot be read (its answer lost
// while a NATS server is lost) fails the snapshot, where it read as free: a round that
// took a held partition for free dealt it afresh and handed it over for nothing, a gap
// in its reads (TestReadsThroughNATSServerLoss).
func TestSnapshotOfAnUnreadHolder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		kv := &ttlKV{ttl: 2 * time.Second, keys: map[string]ttlEntry{}}
		a := &Owners{kv: kv, id: "a-node", value: []byte("a-node host"), ttl: 2 * time.Second}
		ctx := t.Context()
		if err := a.Register(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Take(ctx, "counters.1"); err != nil {
			t.Fatal(err)
		}
		kv.unanswered = "counters.1"
		if members, holders, err := a.Snapshot(ctx); err == nil {
			t.Fatalf("snapshot with a holder unread: members %v, holders %v, no error (the partition reads as free)", members, holders)
		}
		kv.unanswered = ""
		if _, holders, err := a.Snapshot(ctx); err != nil || holders["counters.1"] != "a-node" {
			t.Fatalf("snapshot once answered: holders %v, %v", holders, err)
		}
	})
}

// A membership value is read as far as it is understood: each list by its name, in any
// order, and words of a newer version passed over.
func TestMemberOf(t *testing.T) {
	m := memberOf([]byte("id host priming=3,5 newer=1 standbys=1 stopping=2 refused=4,0 leaving"))
	if !m.leaving || len(m.warm) != 1 || !m.warm[1] || len(m.priming) != 2 || !m.priming[3] || !m.priming[5] || len(m.stopping) != 1 || !m.stopping[2] || len(m.refused) != 2 || !m.refused[4] || !m.refused[0] {
		t.Fatalf("memberOf: %+v", m)
	}
	if m := memberOf([]byte("id host")); m.warm != nil || m.priming != nil || m.stopping != nil || m.refused != nil || m.leaving {
		t.Fatalf("a member that says nothing: %+v", m)
	}
}
