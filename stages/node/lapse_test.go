package node_test

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/stages/node"
)

// TestLeasesLapse: every lease of the prefix lapses at once, as when the ownership
// bucket has no leader for longer than the TTL (a NATS server crash): each partition
// stops and is taken again by its last owner, from its own state, not moved and restored
// elsewhere.
func TestLeasesLapse(t *testing.T) {
	share := func(c *node.Config) {
		c.Partitions, c.Join, c.BackupEvery, c.LeaseTTL = 6, true, 200*time.Millisecond, time.Second
	}
	a, _ := startNode(t, share)
	b, _ := startNode(t, func(c *node.Config) { share(c); c.NATSURL = a.ClientURL() })
	owners := func() (map[int]string, bool) {
		m := map[int]string{}
		for name, n := range map[string]*node.Node{"a": a, "b": b} {
			for _, p := range n.Parts() {
				m[p] = name
			}
		}
		return m, len(m) == 6
	}
	eventually(t, "the partitions spread", func() (bool, string) {
		m, all := owners()
		return all && len(a.Parts()) == 3, fmt.Sprint(m)
	})
	// Backed up once, so that a move would restore rather than start empty.
	eventually(t, "a backup round", func() (bool, string) { return a.Backups.Load() > 1 && b.Backups.Load() > 1, "" })
	before, _ := owners()
	restored := a.PartsRestored.Load() + b.PartsRestored.Load()

	nc, err := nats.Connect(a.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(t.Context(), pipeline.NewSubjects("").OwnersBucket())
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.Keys(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if strings.HasPrefix(k, "counters.") {
			if err := kv.Delete(t.Context(), k); err != nil {
				t.Fatal(err)
			}
		}
	}
	eventually(t, "the partitions stopped", func() (bool, string) {
		return len(a.Parts())+len(b.Parts()) < 6, fmt.Sprint(a.Parts(), b.Parts())
	})
	eventually(t, "every partition owned again", func() (bool, string) {
		m, all := owners()
		return all, fmt.Sprint(m)
	})
	if after, _ := owners(); !maps.Equal(before, after) {
		t.Fatalf("owners before the lapse %v, after %v: partitions moved", before, after)
	}
	if got := a.PartsRestored.Load() + b.PartsRestored.Load(); got != restored {
		t.Fatalf("%d partitions restored from backups after the lapse, want none", got-restored)
	}
}
