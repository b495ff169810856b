package embedded_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline/embedded"
)

// The embedded server does not cap a stream's consumers: nats-server caps each at 1 000
// unless told, and Tally reads TALLY_DELTAS with six consumers a partition (three
// families, owner and standby). A configuration file that sets a cap keeps it.
func TestStreamConsumersNotCapped(t *testing.T) {
	consumers := func(t *testing.T, a embedded.Auth, n int) error {
		t.Helper()
		s, in := start(t, a)
		nc, err := nats.Connect(in.URL(s), in.Options(s)...)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		js, _ := jetstream.New(nc)
		ctx := context.Background()
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, MaxConsumers: -1}); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if _, err := js.CreateConsumer(ctx, "S", jetstream.ConsumerConfig{AckPolicy: jetstream.AckNonePolicy, MemoryStorage: true}); err != nil {
				return fmt.Errorf("consumer %d: %w", i+1, err)
			}
		}
		return nil
	}
	t.Run("default", func(t *testing.T) {
		if err := consumers(t, embedded.Auth{}, 1001); err != nil {
			t.Fatalf("the embedded server capped the stream's consumers: %v", err)
		}
	})
	t.Run("file", func(t *testing.T) {
		conf := filepath.Join(t.TempDir(), "nats.conf")
		if err := os.WriteFile(conf, []byte("jetstream { limits { default_max_consumers: 3 } }\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := consumers(t, embedded.Auth{ConfigFile: conf}, 4); !errors.Is(err, jetstream.ErrMaximumConsumersLimit) {
			t.Fatalf("the fourth consumer under the file's cap of 3: %v, want the limit", err)
		}
	})
}
