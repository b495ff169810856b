package cluster

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline/natstest"
)

func bucketJS(t *testing.T) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(natstest.Connect(t, natstest.Start(t)))
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func ownersConfig(t *testing.T, js jetstream.JetStream, name string) jetstream.KeyValueConfig {
	t.Helper()
	kv, err := js.KeyValue(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return st.(*jetstream.KeyValueBucketStatus).Config()
}

func stateConfig(t *testing.T, js jetstream.JetStream, name string) jetstream.StreamConfig {
	t.Helper()
	st, err := js.Stream(t.Context(), "OBJ_"+name)
	if err != nil {
		t.Fatal(err)
	}
	return st.CachedInfo().Config
}

// What an operator set with nats kv edit survives a restart (Open again); the TTL, which
// the leases are, is Tally's.
func TestOwnersBucketKeepsOperatorEdits(t *testing.T) {
	js := bucketJS(t)
	b := Bucket{Name: "TALLY_OWNERS"}
	if _, err := Open(t.Context(), js, b, t.TempDir(), time.Minute); err != nil {
		t.Fatal(err)
	}
	if c := ownersConfig(t, js, b.Name); c.TTL != time.Minute || c.History != 1 || c.Storage != jetstream.FileStorage || c.Replicas != 1 {
		t.Fatalf("new ownership bucket: %+v", c)
	}
	edit := ownersConfig(t, js, b.Name)
	edit.Description, edit.History, edit.MaxBytes, edit.MaxValueSize = "ours", 4, 1<<20, 4096
	edit.Compression, edit.Metadata, edit.TTL = true, map[string]string{"owner": "ops"}, time.Hour
	if _, err := js.UpdateKeyValue(t.Context(), edit); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(t.Context(), js, b, t.TempDir(), time.Minute); err != nil {
		t.Fatal(err)
	}
	c := ownersConfig(t, js, b.Name)
	if c.Description != "ours" || c.History != 4 || c.MaxBytes != 1<<20 || c.MaxValueSize != 4096 || !c.Compression || c.Metadata["owner"] != "ops" {
		t.Errorf("a restart undid the ownership bucket's edit: %+v", c)
	}
	if c.TTL != time.Minute {
		t.Errorf("ownership bucket's TTL %v, want the leases' %v", c.TTL, time.Minute)
	}
}

// A bucket whose leases would not survive a NATS restart is refused, naming the field.
func TestOwnersBucketRefusesMemory(t *testing.T) {
	js := bucketJS(t)
	b := Bucket{Name: "TALLY_OWNERS"}
	if _, err := js.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: b.Name, TTL: time.Minute, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	_, err := Open(t.Context(), js, b, t.TempDir(), time.Minute)
	if !errors.Is(err, ErrBucketConfig) || !strings.Contains(err.Error(), "storage Memory, Tally needs File") {
		t.Fatalf("ownership bucket in memory: %v, want ErrBucketConfig naming the storage", err)
	}
}

// What an operator set with nats object edit survives a restart (OpenState again).
func TestStateBucketKeepsOperatorEdits(t *testing.T) {
	js := bucketJS(t)
	b := Bucket{Name: "TALLY_STATE"}
	if _, err := OpenState(t.Context(), js, b); err != nil {
		t.Fatal(err)
	}
	if c := stateConfig(t, js, b.Name); c.MaxAge != 0 || c.Storage != jetstream.FileStorage || c.Replicas != 1 {
		t.Fatalf("new state bucket: %+v", c)
	}
	if _, err := js.UpdateObjectStore(t.Context(), jetstream.ObjectStoreConfig{Bucket: b.Name, Description: "ours",
		MaxBytes: 1 << 30, Compression: true, Metadata: map[string]string{"owner": "ops"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenState(t.Context(), js, b); err != nil {
		t.Fatal(err)
	}
	if c := stateConfig(t, js, b.Name); c.Description != "ours" || c.MaxBytes != 1<<30 || c.Compression != jetstream.S2Compression || c.Metadata["owner"] != "ops" {
		t.Errorf("a restart undid the state bucket's edit: %+v", c)
	}
}

// A setting under which a backup could vanish while the log it covers is purged is
// refused, naming the field, and left as it is.
func TestStateBucketRefusesWhatBreaksTally(t *testing.T) {
	f := func(t *testing.T, cfg jetstream.ObjectStoreConfig, want string) {
		t.Helper()
		js := bucketJS(t)
		cfg.Bucket = "TALLY_STATE"
		if _, err := js.CreateObjectStore(t.Context(), cfg); err != nil {
			t.Fatal(err)
		}
		_, err := OpenState(t.Context(), js, Bucket{Name: cfg.Bucket})
		if !errors.Is(err, ErrBucketConfig) || !strings.Contains(err.Error(), want) {
			t.Fatalf("state bucket %+v: %v, want ErrBucketConfig naming %q", cfg, err, want)
		}
		if c := stateConfig(t, js, cfg.Bucket); c.MaxAge != cfg.TTL || c.Storage != cfg.Storage {
			t.Fatalf("a refused start changed the state bucket: %+v", c)
		}
	}
	f(t, jetstream.ObjectStoreConfig{TTL: time.Hour}, "ttl 1h0m0s, Tally needs 0")
	f(t, jetstream.ObjectStoreConfig{Storage: jetstream.MemoryStorage}, "storage Memory, Tally needs File")
}

// A lease that expires tells the watch of the ownership bucket (Changes), so that its
// standby takes the partition over at once: the server leaves a marker where the key
// was. Before, an expiry was silent, and a dead owner's partitions waited for the
// survivors' next round, up to a fifth of the TTL after the lease was over. A bucket
// made without markers (an older Tally) is given them.
func TestLeaseExpiryIsAChange(t *testing.T) {
	js := bucketJS(t)
	b := Bucket{Name: "TALLY_OWNERS"}
	if _, err := js.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: b.Name, TTL: time.Second, History: 1, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	o, err := Open(t.Context(), js, b, t.TempDir(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if c := ownersConfig(t, js, b.Name); c.LimitMarkerTTL != expiryMarkerTTL {
		t.Fatalf("ownership bucket made without expiry markers, opened again: marker TTL %v, want %v", c.LimitMarkerTTL, expiryMarkerTTL)
	}
	watcher, err := Open(t.Context(), js, b, t.TempDir(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	changed := make(chan struct{}, 16)
	go func() { _ = watcher.Changes(t.Context(), func() { changed <- struct{}{} }) }()
	time.Sleep(200 * time.Millisecond) // the watch set up
	l, err := o.Take(t.Context(), "counters.0")
	if err != nil {
		t.Fatal(err)
	}
	_ = l // never renewed: it expires after the TTL
	deadline := time.After(10 * time.Second)
	for {
		select {
		case <-changed:
			if _, err := watcher.kv.Get(t.Context(), "counters.0"); errors.Is(err, jetstream.ErrKeyNotFound) {
				return
			}
		case <-deadline:
			t.Fatal("the lease counters.0 expired and the watch of the bucket said nothing")
		}
	}
}
