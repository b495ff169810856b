package client

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/nats-io/nats.go"
)

// replies takes the answers to a client's requests on one subscription of its own, as
// nats.go's request mux does, so that a request still waiting when the connection
// reconnects can be sent again: its message, or the answer to it, may have been on the
// way through the server that went (a nats-server stopped or killed under a get every
// 50 ms lost about one get in a hundred and fifty, waited out to its timeout). Every
// request of the client is a read, which asking twice changes nothing.
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

// request sends data to subject and returns its reply, sending it again each time the
// connection reconnects meanwhile, until ctx ends. "No responders" is nats.ErrNoResponders.
func (r *replies) request(ctx context.Context, subject string, data []byte) (*nats.Msg, error) {
	if err := r.start(); err != nil {
		return r.nc.RequestWithContext(ctx, subject, data)
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
	msg := &nats.Msg{Subject: subject, Reply: r.inbox + "." + token, Data: data}
	if err := r.nc.PublishMsg(msg); err != nil {
		return nil, fmt.Errorf("cannot send the request: %w", err)
	}
	for {
		select {
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
			if err := r.nc.PublishMsg(msg); err != nil {
				return nil, fmt.Errorf("cannot send the request again: %w", err)
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
