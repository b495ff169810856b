package embedded

import (
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Config configures an embedded nats-server with JetStream.
type Config struct {
	Host     string
	Port     int // -1 picks a free port
	StoreDir string
	// MaxPayload raises the server's message size limit (default 8 MiB) so batches fit.
	MaxPayload int32
	Logger     server.Logger
}

// Start starts a nats-server with JetStream and waits until it accepts clients.
func Start(c Config) (*server.Server, error) {
	if c.MaxPayload == 0 {
		c.MaxPayload = 8 << 20
	}
	opts := &server.Options{
		ServerName: "tally-embedded",
		Host:       c.Host,
		Port:       c.Port,
		JetStream:  true,
		StoreDir:   c.StoreDir,
		MaxPayload: c.MaxPayload,
		NoSigs:     true,
		NoLog:      c.Logger == nil,
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("cannot configure embedded NATS: %w", err)
	}
	if c.Logger != nil {
		s.SetLoggerV2(c.Logger, false, false, false)
	}
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("embedded NATS did not start on %s:%d within 30s", c.Host, c.Port)
	}
	return s, nil
}
