// Package natstest starts a real embedded nats-server with JetStream for a test: a free
// loopback port, storage in t.TempDir(), shut down by t.Cleanup.
package natstest

import (
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/pipeline"
)

// Start starts a server for t.
func Start(t testing.TB) *server.Server {
	t.Helper()
	s, err := pipeline.StartEmbedded(pipeline.EmbedConfig{Host: "127.0.0.1", Port: -1, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

// Connect connects to s, closing the connection at cleanup.
func Connect(t testing.TB, s *server.Server) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}
