// Package natstest starts a real embedded nats-server with JetStream for a test: a free
// loopback port, storage in t.TempDir(), shut down by t.Cleanup.
package natstest

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/pipeline/embedded"
)

// Start starts a server for t.
func Start(t testing.TB) *server.Server {
	t.Helper()
	s, err := embedded.Start(embedded.Config{Host: "127.0.0.1", Port: -1, StoreDir: t.TempDir()})
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

// Cluster is a JetStream cluster of servers on loopback ports, for tests of what a
// cluster does when one of its servers goes away.
type Cluster struct {
	Servers []*server.Server
	opts    []*server.Options
}

// StartCluster starts n servers routed to each other as one JetStream cluster and waits
// until JetStream has a meta leader. Cleanup shuts them down.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	ports := make([]int, n)
	for i := range ports {
		ports[i] = freePort(t)
	}
	var routes []*url.URL
	for _, p := range ports {
		routes = append(routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", p)})
	}
	c := &Cluster{}
	for i := range n {
		o := &server.Options{
			ServerName: fmt.Sprintf("n%d", i+1), Host: "127.0.0.1", Port: -1,
			JetStream: true, StoreDir: t.TempDir(), MaxPayload: 8 << 20, NoSigs: true, NoLog: true,
			Cluster: server.ClusterOpts{Name: "tally-test", Host: "127.0.0.1", Port: ports[i]},
			Routes:  routes,
		}
		c.opts = append(c.opts, o)
		c.Servers = append(c.Servers, c.start(t, o))
		o.Port = c.Servers[i].Addr().(*net.TCPAddr).Port // the same one again after a Stop
	}
	t.Cleanup(func() {
		for _, s := range c.Servers {
			s.Shutdown()
			s.WaitForShutdown()
		}
	})
	Eventually(t, 30*time.Second, "a JetStream meta leader and every server current", func() (bool, string) {
		leader := false
		for _, s := range c.Servers {
			if !s.JetStreamIsCurrent() {
				return false, s.Name() + " not current"
			}
			leader = leader || s.JetStreamIsLeader()
		}
		return leader, "no leader yet"
	})
	return c
}

func (c *Cluster) start(t testing.TB, o *server.Options) *server.Server {
	t.Helper()
	s, err := server.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		t.Fatalf("server %s did not start", o.ServerName)
	}
	return s
}

// URLs is the client URLs of the servers, comma-separated, as tallyd --nats takes them.
func (c *Cluster) URLs() string {
	var us []string
	for _, s := range c.Servers {
		us = append(us, s.ClientURL())
	}
	return strings.Join(us, ",")
}

// Stop shuts server i down, as a crash of its machine would (its store stays on disk).
func (c *Cluster) Stop(i int) {
	c.Servers[i].Shutdown()
	c.Servers[i].WaitForShutdown()
}

// Start starts server i again after Stop, on its client port and store, as its machine
// coming back would.
func (c *Cluster) Start(t testing.TB, i int) {
	t.Helper()
	c.Servers[i] = c.start(t, c.opts[i])
}

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Throttled starts a proxy to the NATS server at url that passes what the server sends
// at rate bytes a second on each connection, as a process too busy to read its socket
// does, and returns its URL.
func Throttled(t testing.TB, url string, rate int) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	addr := strings.TrimPrefix(url, "nats://")
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, up)
			mu.Unlock()
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() {
				defer c.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := up.Read(buf)
					if n > 0 {
						if _, err := c.Write(buf[:n]); err != nil {
							return
						}
						time.Sleep(time.Duration(n) * time.Second / time.Duration(rate))
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return "nats://" + ln.Addr().String()
}
