package rig

import (
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/tally-dev/tally/pipeline/embedded"
)

// NATSProc is a standalone nats-server with JetStream that a test can stop and start
// again on the same port and store directory, as an operator restarting NATS would.
type NATSProc struct {
	t     testing.TB
	host  string
	port  int
	store string
	mu    sync.Mutex
	s     *server.Server
}

// StartNATS starts a NATSProc on a free loopback port with its store in t.TempDir(),
// stopped at the end of the test.
func StartNATS(t testing.TB) *NATSProc {
	t.Helper()
	p := &NATSProc{t: t, host: "127.0.0.1", store: t.TempDir()}
	_, port, _ := net.SplitHostPort(FreeAddr(t))
	p.port, _ = strconv.Atoi(port)
	p.Start()
	t.Cleanup(p.Stop)
	return p
}

// URL is the server's client URL, the same across restarts.
func (p *NATSProc) URL() string { return "nats://" + net.JoinHostPort(p.host, strconv.Itoa(p.port)) }

// Start starts the server again after Stop.
func (p *NATSProc) Start() {
	p.t.Helper()
	var s *server.Server
	var err error
	for range 50 { // the port may linger briefly after a shutdown
		if s, err = embedded.Start(embedded.Config{Host: p.host, Port: p.port, StoreDir: p.store}); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		p.t.Errorf("restart NATS: %v", err)
		return
	}
	p.mu.Lock()
	p.s = s
	p.mu.Unlock()
}

// Stop shuts the server down and waits until it is down; stopping a stopped server
// does nothing.
func (p *NATSProc) Stop() {
	p.mu.Lock()
	s := p.s
	p.s = nil
	p.mu.Unlock()
	if s != nil {
		s.Shutdown()
		s.WaitForShutdown()
	}
}

// FreeAddr is a loopback address with a port free now.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
