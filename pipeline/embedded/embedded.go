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
	// Auth secures the server; the zero value is an open server on Host:Port.
	Auth Auth
	// Internal, when set, is the embedding process's own connection: admitted with
	// every permission whatever Auth requires (see Internal).
	Internal *Internal
}

// Start starts a nats-server with JetStream and waits until it accepts clients.
func Start(c Config) (*server.Server, error) {
	opts, err := c.options()
	if err != nil {
		return nil, err
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
		return nil, fmt.Errorf("embedded NATS did not start on %s:%d within 30s", opts.Host, opts.Port)
	}
	return s, nil
}

// options are the server's: those of Auth.ConfigFile if any, with JetStream on, the
// store directory, address and payload limit of c where the file sets none, and the
// users, nkeys and TLS of Auth.
func (c Config) options() (*server.Options, error) {
	opts := &server.Options{}
	if f := c.Auth.ConfigFile; f != "" {
		var err error
		if opts, err = server.ProcessConfigFile(f); err != nil {
			return nil, fmt.Errorf("NATS configuration %s: %w", f, err)
		}
	}
	if opts.ServerName == "" {
		opts.ServerName = "tally-embedded"
	}
	if opts.Host == "" {
		opts.Host = c.Host
	}
	if opts.Port == 0 {
		opts.Port = c.Port
	}
	if opts.StoreDir == "" {
		opts.StoreDir = c.StoreDir
	}
	if opts.MaxPayload == 0 {
		opts.MaxPayload = c.MaxPayload
	}
	if opts.MaxPayload == 0 {
		opts.MaxPayload = 8 << 20
	}
	opts.JetStream = true
	if opts.JetStreamLimits.DefaultMaxConsumers == 0 {
		// nats-server caps each stream at 1 000 consumers unless told: Tally's readers
		// of TALLY_DELTAS alone are six a partition with standbys (three families, owner
		// and standby), and a server that serves Tally alone needs no cap. A file that
		// sets one (jetstream { limits { default_max_consumers } }) is kept.
		opts.JetStreamLimits.DefaultMaxConsumers = -1
	}
	opts.NoSigs = true // the embedding process handles signals
	opts.NoLog = c.Logger == nil
	if err := c.Auth.apply(opts); err != nil {
		return nil, err
	}
	if c.Internal != nil {
		if err := c.Internal.admit(opts, c.Auth.Account); err != nil {
			return nil, err
		}
	}
	return opts, nil
}
