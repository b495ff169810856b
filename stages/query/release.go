package query

import (
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// A partition's subscription (<prefix>.part…, <prefix>.standby…) comes and goes while
// the connection lives on, in a queue group that the server routes each request to one
// member of. Drained, the requests the client has already queued for it are answered
// (that the partition is not here), which an unsubscribe would drop. But nats.go (1.55)
// leaves a subscription drained across a reconnect on the server: reconnecting, the
// client sends the SUB of every subscription it still has, the draining one among them,
// and when the drain ends it forgets it without an UNSUB. The server then goes on handing
// the queue group's requests to a subscription nobody reads, and they go unanswered until
// the connection drops again: after a NATS restart during which leases lapsed, the
// health asked of partitions timed out for minutes (TestReleasedWhileReconnecting,
// TestChaosCluster). So release drains only a connected connection (one that is not
// unsubscribes at once: its reconnect then has nothing to send again), and a drain that a
// reconnect overlapped makes the connection reconnect once more after it (healer),
// which sends only the subscriptions it has.
func (s *Server) release(sub *nats.Subscription) {
	if !s.nc.IsConnected() {
		_ = sub.Unsubscribe()
		return
	}
	before := s.nc.Stats().Reconnects
	if err := sub.Drain(); err != nil {
		_ = sub.Unsubscribe()
		return
	}
	closed := sub.StatusChanged(nats.SubscriptionClosed)
	go func() {
		select {
		case <-closed:
		case <-time.After(releaseWait):
		}
		if s.nc.Stats().Reconnects != before {
			s.heal.after(s.nc)
		}
	}()
}

// releaseWait bounds how long release watches a drain: a drain waits for a round trip to
// the server and for the requests queued to be answered (each within Config.Timeout).
const releaseWait = time.Minute

// healer reconnects a connection once after the drains that need it, however many end
// together: each ends within healDelay of the reconnect.
type healer struct {
	mu      sync.Mutex
	pending bool
}

// healDelay gathers the drains that end together under one reconnect.
const healDelay = 100 * time.Millisecond

func (h *healer) after(nc *nats.Conn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pending {
		return
	}
	h.pending = true
	time.AfterFunc(healDelay, func() {
		h.mu.Lock()
		h.pending = false
		h.mu.Unlock()
		if !nc.IsClosed() {
			_ = nc.ForceReconnect()
		}
	})
}
