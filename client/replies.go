package client

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// minHedge is the least time after which a request still unanswered is sent again
// (see replies.request): a request given less than four times that is sent once.
const minHedge = 50 * time.Millisecond

// replies takes the answers to a client's requests on one subscription of its own, as
// nats.go's request mux does, so that a request still waiting when the connection
// reconnects can be sent again: its message, or the answer to it, may have been on the
// way through the server that went. A request can also be lost inside NATS without the
// client's connection going anywhere — routed to a server just as it stopped, or
// answered through one (TestRequestUnansweredAskedOnceMore): one unanswered after a
// quarter of its time is sent once more. Every request of the client is a read, which
// asking twice changes nothing; the first answer is taken.
type replies struct {
	nc    *nats.Conn
	once  sync.Once
	err   error  // why the subscription could not be made
	inbox string // the subscription's subject, less its last token

	mu      sync.Mutex
	next    uint64
	waiting map[string]chan *nats.Msg // by the last token of their reply subject
	again   chan struct{}             // closed when the connection reconnects, or closes
	closed  bool
}

// start subscribes, once, to the inbox the client's replies come to, and watches the
// connection for a reconnect.
func (r *replies) start() error {
	r.once.Do(func() {
		r.inbox = r.nc.NewInbox() // the connection's inbox prefix: the permissions expect it
		r.waiting = map[string]chan *nats.Msg{}
		r.again = make(chan struct{})
		if _, r.err = r.nc.Subscribe(r.inbox+".*", r.deliver); r.err != nil {
			return
		}
		st := r.nc.StatusChanged(nats.CONNECTED, nats.CLOSED)
		if r.nc.IsClosed() { // closed before the listener: no event will come
			r.nc.RemoveStatusListener(st)
		}
		go r.watch(st)
	})
	return r.err
}

// deliver hands a reply to the request waiting for it; one for no request (answered
// already: a request sent again may be answered twice) is dropped.
func (r *replies) deliver(m *nats.Msg) {
	token := m.Subject[len(r.inbox)+1:]
	r.mu.Lock()
	ch := r.waiting[token]
	r.mu.Unlock()
	if ch != nil {
		select {
		case ch <- m:
		default: // answered twice: the first is taken
		}
	}
}

// watch wakes the requests waiting at each reconnect, and at the close of the
// connection, after which it ends.
func (r *replies) watch(st chan nats.Status) {
	for s := range st {
		if s == nats.CLOSED {
			r.nc.RemoveStatusListener(st) // ends the loop
			continue
		}
		r.mu.Lock()
		close(r.again)
		r.again = make(chan struct{})
		r.mu.Unlock()
	}
	r.mu.Lock()
	r.closed = true
	close(r.again)
	r.mu.Unlock()
}

// request sends msg (its subject, headers and data) and returns its reply, sending it
// again each time the connection reconnects meanwhile, and once more when a quarter of
// the time ctx gives it has passed unanswered, until ctx ends. "No responders" is
// nats.ErrNoResponders.
func (r *replies) request(ctx context.Context, msg *nats.Msg) (*nats.Msg, error) {
	if err := r.start(); err != nil {
		return r.nc.RequestMsgWithContext(ctx, msg)
	}
	ch := make(chan *nats.Msg, 1)
	r.mu.Lock()
	r.next++
	token := strconv.FormatUint(r.next, 36)
	r.waiting[token] = ch
	again, closed := r.again, r.closed
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.waiting, token)
		r.mu.Unlock()
	}()
	if closed {
		return nil, nats.ErrConnectionClosed
	}
	msg.Reply = r.inbox + "." + token
	send := func(again string) error {
		if err := r.nc.PublishMsg(msg); err != nil {
			return fmt.Errorf("cannot send the request%s: %w", again, err)
		}
		return nil
	}
	if err := send(""); err != nil {
		return nil, err
	}
	var hedge <-chan time.Time // once, after a quarter of the time the request has
	if d, ok := ctx.Deadline(); ok && time.Until(d) >= 4*minHedge {
		t := hedgeTimer(time.Until(d) / 4)
		defer putHedgeTimer(t)
		hedge = t.C
	}
	for {
		select {
		case <-hedge:
			hedge = nil
			if err := send(" again"); err != nil {
				return nil, err
			}
		case m := <-ch:
			if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
				return nil, nats.ErrNoResponders
			}
			return m, nil
		case <-again:
			r.mu.Lock()
			again, closed = r.again, r.closed
			r.mu.Unlock()
			if closed {
				return nil, nats.ErrConnectionClosed
			}
			if err := send(" again"); err != nil {
				return nil, err
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// hedgeTimers keeps the stopped timers of finished requests: a request's own timer was
// three of a 20-id get's 80 allocations.
var hedgeTimers sync.Pool

// hedgeTimer is a timer firing after d, taken from hedgeTimers when there is one.
func hedgeTimer(d time.Duration) *time.Timer {
	if t, ok := hedgeTimers.Get().(*time.Timer); ok {
		t.Reset(d)
		return t
	}
	return time.NewTimer(d)
}

// putHedgeTimer stops t and keeps it for another request: once stopped, its channel
// delivers nothing of before (Go 1.23 timers).
func putHedgeTimer(t *time.Timer) {
	t.Stop()
	hedgeTimers.Put(t)
}
