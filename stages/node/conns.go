package node

// A process's connections to NATS — the one its stages' streams go on, the one its
// leases are renewed on, the one its queries are answered on — and the NATS server it
// embeds unless told one to join.

import (
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/pipeline/embedded"
	"github.com/tally-dev/tally/pipeline/natsconn"
)

// conns are the process's own connections to NATS (the readers' are readJS's).
func (n *Node) conns() []*nats.Conn { return []*nats.Conn{n.nc, n.ctl, n.qc} }

// connect opens one of the process's connections to NATS, named name. It reconnects
// soon after a NATS restart (the default waits 2 s between attempts): the stages resume
// by themselves once the connection is back.
func (n *Node) connect(url string, conn []nats.Option, name string) (*nats.Conn, error) {
	log := n.log
	nc, err := nats.Connect(url, append(slices.Clone(conn), nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil { // nil: our own close
				n.NATSDisconnects.Add(1)
				log.Warn("NATS disconnected", "connection", name, "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("NATS reconnected", "connection", name, "url", c.ConnectedUrlRedacted()) }))...)
	if err != nil {
		return nil, fmt.Errorf("cannot connect to NATS at %s: %w", natsconn.Redacted(url), err)
	}
	return nc, nil
}

// natsOptions are where and how this process connects to NATS: to the servers of
// NATSURL as NATSAuth says, or else to the embedded server it starts, in-process when
// that server is secured (no TLS to verify, and its own user when clients must
// authenticate).
func (n *Node) natsOptions() (string, []nats.Option, error) {
	if n.cfg.NATSURL != "" {
		return n.cfg.NATSAuth.Options(n.cfg.NATSURL, "")
	}
	if !n.cfg.NATSServer.Enabled() {
		var err error
		if n.ns, err = n.embed(nil); err != nil {
			return "", nil, err
		}
		return n.ns.ClientURL(), nil, nil
	}
	in, err := embedded.NewInternal()
	if err != nil {
		return "", nil, err
	}
	if n.ns, err = n.embed(in); err != nil {
		return "", nil, err
	}
	return in.URL(n.ns), in.Options(n.ns), nil
}

func (n *Node) embed(in *embedded.Internal) (*server.Server, error) {
	host, port, err := net.SplitHostPort(n.cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("%w: listen address %q: %w", ErrConfig, n.cfg.Listen, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return nil, fmt.Errorf("%w: listen port %q: %w", ErrConfig, port, err)
	}
	if p > 0 { // say so now rather than after the server's start-up timeout
		ln, err := net.Listen("tcp", n.cfg.Listen)
		if err != nil {
			return nil, fmt.Errorf("cannot listen on %s (is another tallyd or NATS running?): %w", n.cfg.Listen, err)
		}
		ln.Close()
	}
	return embedded.Start(embedded.Config{Host: host, Port: p, StoreDir: filepath.Join(n.cfg.DataDir, "nats"), Auth: n.cfg.NATSServer, Internal: in})
}

// autoReplicas is 3 on a NATS cluster of three or more servers (those the client was
// given and those the cluster told it about), else 1.
func autoReplicas(nc *nats.Conn) int {
	if nc.ConnectedClusterName() != "" && len(nc.Servers()) >= 3 {
		return 3
	}
	return 1
}
