package client_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/pipeline/embedded"
	"github.com/tally-dev/tally/stages/node"
)

// A deployment where each user may read only the replies under its own inbox prefix:
// alice may ask for counts and subscribe to _INBOX_alice.> only. Her connection names
// that prefix, and every answer of the client comes there.
func Example_inboxPrefix() {
	dir, _ := os.MkdirTemp("", "tally-example-")
	defer os.RemoveAll(dir)
	conf := filepath.Join(dir, "nats.conf")
	_ = os.WriteFile(conf, []byte(`accounts { TALLY: { jetstream: enabled, users: [
	  {user: alice, password: alice-pw, permissions: {publish: ["tally.get.>"], subscribe: ["_INBOX_alice.>"]}}
	] } }`), 0o600)
	cfg := node.DefaultConfig()
	cfg.DataDir, cfg.Listen, cfg.Partitions = dir, "127.0.0.1:-1", 2
	cfg.NATSServer = embedded.Auth{ConfigFile: conf, Account: "TALLY"}
	n, err := node.Start(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer n.Close()
	url := strings.Replace(n.ClientURL(), "nats://", "nats://alice:alice-pw@", 1)

	nc, err := nats.Connect(url, nats.CustomInboxPrefix("_INBOX_alice"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()
	c, _ := client.New(nc, client.WithPartitions(2))
	r, err := c.Get(context.Background(), "post", 42)
	fmt.Println(r.Counts, err)
	// Output: [[0 0 0 0]] <nil>
}
