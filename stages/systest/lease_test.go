package systest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/natstest"
	"github.com/tally-dev/tally/stages/node"
)

// TestOneOwner starts two tallyd on one NATS: the second refuses with ErrOwned (it would
// count the same events again from its own disk) and starts once the first has stopped.
// Then another process takes a partition's lease key, as a new owner would after this
// one was paused past its lease: that partition (its event stage and counters) stops at
// the next renewal and the others go on.
func TestOneOwner(t *testing.T) {
	s := natstest.Start(t)
	cfg := func() node.Config {
		c := node.DefaultConfig()
		c.DataDir, c.NATSURL, c.Partitions = t.TempDir(), s.ClientURL(), 2
		return c
	}
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	a, err := node.Start(ctx, cfg(), log)
	if err != nil {
		t.Fatal(err)
	}
	bcfg := cfg()
	if b, err := node.Start(ctx, bcfg, log); !errors.Is(err, node.ErrOwned) {
		if b != nil {
			b.Close()
		}
		t.Fatalf("second tallyd: %v, want ErrOwned", err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := node.Start(ctx, bcfg, log)
	if err != nil {
		t.Fatalf("after the owner stopped: %v", err)
	}
	defer b.Close()

	js, _ := jetstream.New(natstest.Connect(t, s))
	kv, err := js.KeyValue(ctx, pipeline.NewSubjects(pipeline.DefaultPrefix).OwnersBucket())
	if err != nil {
		t.Fatal(err)
	}
	// A partition's lease taken: that partition stops, the rest go on.
	if _, err := kv.Put(ctx, "counters.0", []byte("usurper")); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 30*time.Second, "the usurped partition stopped", func() (bool, string) {
		return !slices.Contains(b.Parts(), 0), fmt.Sprint("owns ", b.Parts())
	})
	select {
	case <-b.Failed():
		t.Fatal("a lost partition stopped the whole node")
	default:
	}
	if !slices.Equal(b.Parts(), []int{1}) || !b.Events() {
		t.Fatalf("after losing partition 0: owns %v, events %v", b.Parts(), b.Events())
	}
	if _, err := kv.Put(ctx, "counters.1", []byte("usurper")); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 30*time.Second, "the second usurped partition stopped", func() (bool, string) {
		return len(b.Parts()) == 0 && !b.Events(), fmt.Sprint("owns ", b.Parts())
	})
	select {
	case <-b.Failed():
		t.Fatal("lost partitions stopped the whole node")
	default:
	}
	if err := b.Close(); err != nil {
		t.Fatalf("close of the node that lost its partitions: %v", err)
	}
}
