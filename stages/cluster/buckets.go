package cluster

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Bucket says which bucket of Tally's to open, and its replicas.
type Bucket struct {
	Name string
	// Replicas is set on a new or an existing bucket; 0 keeps an existing bucket's (what
	// an operator set survives a restart) and gives a new one NewReplicas (1 when 0).
	Replicas    int
	NewReplicas int
}

func (b Bucket) replicas(have int) int {
	switch {
	case b.Replicas > 0:
		return b.Replicas
	case have > 0:
		return have
	}
	return max(b.NewReplicas, 1)
}

// refuse is the error for a bucket's setting under which Tally would break: it names the
// field, the value Tally needs and how to change it.
func refuse(kind, name, field string, got, need any, why string) error {
	return fmt.Errorf("%w: %s %s has %s %v, Tally needs %v (%s); change it with nats %s edit",
		ErrBucketConfig, kind, name, field, got, need, why, kind)
}

// openOwners creates the ownership bucket when missing, with the lease TTL ttl; an
// existing one keeps what an operator set (history, max bytes and value size,
// compression, placement, metadata, republishing, the description, and replicas unless
// b says) and is given the TTL, which is the leases': a key outliving its owner's TTL
// holds a dead owner's partitions longer, one expiring sooner lets another process take
// a partition its owner still holds; and markers where keys expire (expiryMarkerTTL),
// unless an operator set their TTL. A setting under which leases cannot be kept is
// refused (ErrBucketConfig).
func openOwners(ctx context.Context, js jetstream.JetStream, b Bucket, ttl time.Duration) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, b.Name)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		cfg := jetstream.KeyValueConfig{
			Bucket: b.Name, Description: "Tally partition ownership and live processes", TTL: ttl, History: 1,
			Replicas: b.replicas(0), Storage: jetstream.FileStorage, LimitMarkerTTL: expiryMarkerTTL,
		}
		kv, err := js.CreateKeyValue(ctx, cfg)
		if errors.Is(err, jetstream.ErrLimitMarkerTTLNotSupported) { // a server before 2.11
			cfg.LimitMarkerTTL = 0
			kv, err = js.CreateKeyValue(ctx, cfg)
		}
		return kv, err
	} else if err != nil {
		return nil, err
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, err
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok {
		return nil, fmt.Errorf("the status of bucket %s is a %T", b.Name, st)
	}
	have := bs.Config()
	// A mirror refuses writes; sources would bring in another prefix's leases.
	if have.Mirror != nil || len(have.Sources) > 0 {
		return nil, refuse("kv", b.Name, "a mirror or sources", "set", "none", "leases are written here by the processes of this prefix only")
	}
	// Lost at a NATS restart, a lease is free while its owner, until it next renews,
	// still acts on it.
	if have.Storage != jetstream.FileStorage {
		return nil, refuse("kv", b.Name, "storage", have.Storage, jetstream.FileStorage, "a lease must survive a NATS restart")
	}
	merged := have
	merged.TTL = ttl
	merged.Replicas = b.replicas(have.Replicas)
	if merged.LimitMarkerTTL == 0 {
		merged.LimitMarkerTTL = expiryMarkerTTL
	}
	if reflect.DeepEqual(merged, have) {
		return kv, nil
	}
	kv, err = js.UpdateKeyValue(ctx, merged)
	if errors.Is(err, jetstream.ErrLimitMarkerTTLNotSupported) && have.LimitMarkerTTL == 0 {
		merged.LimitMarkerTTL = 0
		if reflect.DeepEqual(merged, have) {
			return js.KeyValue(ctx, b.Name)
		}
		kv, err = js.UpdateKeyValue(ctx, merged)
	}
	return kv, err
}

// expiryMarkerTTL is how long the ownership bucket keeps the marker the server leaves
// where a key expired (the least it takes): the marker is what tells a watch that a
// dead owner's lease is over (Changes), so that its standbys take the partition at once
// rather than at their next round, up to a fifth of the TTL later. Without it an
// expiry is silent.
const expiryMarkerTTL = time.Second

// OpenState creates the state bucket (backups) when missing; an existing one keeps what
// an operator set (max bytes, compression, placement, metadata, the description, and
// replicas unless b says). A setting under which a backup could be lost while the log
// records it covers are purged — an age (TTL), memory storage — or none could be
// written — a seal, a mirror — is refused (ErrBucketConfig).
func OpenState(ctx context.Context, js jetstream.JetStream, b Bucket) (jetstream.ObjectStore, error) {
	obs, err := js.ObjectStore(ctx, b.Name)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		obs, err = js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: b.Name, Replicas: b.replicas(0),
			Storage: jetstream.FileStorage, Description: "Tally state backups: what a new owner of a partition starts from"})
	}
	if err != nil {
		return nil, fmt.Errorf("cannot set up the state bucket %s: %w", b.Name, err)
	}
	st, err := obs.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("cannot read the state bucket %s: %w", b.Name, err)
	}
	bs, ok := st.(*jetstream.ObjectBucketStatus)
	if !ok || bs.StreamInfo() == nil {
		return nil, fmt.Errorf("the status of bucket %s is a %T", b.Name, st)
	}
	sc := bs.StreamInfo().Config
	const why = "a new owner starts from the last backup; the log before it is purged"
	switch {
	case sc.MaxAge > 0:
		return nil, refuse("object", b.Name, "ttl", sc.MaxAge, 0, why)
	case sc.Storage != jetstream.FileStorage:
		return nil, refuse("object", b.Name, "storage", sc.Storage, jetstream.FileStorage, why)
	case sc.Sealed || sc.Mirror != nil:
		return nil, refuse("object", b.Name, "a seal or a mirror", "set", "none", "backups are written here")
	}
	if n := b.replicas(sc.Replicas); n != sc.Replicas {
		// The object store's configuration is its stream's, as UpdateObjectStore writes it.
		obs, err = js.UpdateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: b.Name, Description: sc.Description, TTL: sc.MaxAge,
			MaxBytes: sc.MaxBytes, Storage: sc.Storage, Replicas: n, Placement: sc.Placement,
			Compression: sc.Compression != jetstream.NoCompression, Metadata: sc.Metadata})
		if err != nil {
			return nil, fmt.Errorf("cannot set the replicas of the state bucket %s: %w", b.Name, err)
		}
	}
	return obs, nil
}
