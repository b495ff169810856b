package flow

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ConnPulls is what the Readers on one connection may have pulled and not received,
// together: half of NATS's default max_pending (64 MiB), the bytes a server queues for
// one connection before it cuts it off as a slow consumer. A Reader pulls up to the
// largest payload its connection takes (8 MiB embedded) and, under a backlog, the server
// sends all of it at once: sixteen partitions' readers on one connection asked for
// 128 MiB of events and more for their deltas, and the connection was cut whenever the
// process read its socket slower than the server wrote (11-30, a 2 M-event backlog:
// publishes and log appends failing for seconds, partitions stopped and replayed).
const ConnPulls = 32 << 20

// Spread is a JetStream context whose ordered consumers, the Readers', are made on
// connections of their own, as few Readers to each as keep it under ConnPulls; all else
// goes through the context it wraps. A connection is made when every one made is full,
// and kept for the next Reader once its own stop. Close closes them.
type Spread struct {
	jetstream.JetStream
	per  int                        // Readers a connection carries
	dial func() (*nats.Conn, error) // a connection like the wrapped one's

	log *slog.Logger

	mu     sync.Mutex
	conns  []*spreadConn
	closed bool
	warned bool // that no more connections could be made
}

type spreadConn struct {
	js      jetstream.JetStream
	readers int
}

// NewSpread spreads the Readers of js, none of whose buffers is larger than maxBuf
// bytes (Buffer.Bytes), over connections dial makes. When dial fails, a Reader shares
// the connection with the fewest (said once on log): one not reading would stop its
// partition.
func NewSpread(js jetstream.JetStream, maxBuf int, dial func() (*nats.Conn, error), log *slog.Logger) *Spread {
	return &Spread{JetStream: js, per: max(1, ConnPulls/pullBytes(js, maxBuf)), dial: dial, log: log}
}

// PerConn is how many Readers a connection carries.
func (s *Spread) PerConn() int { return s.per }

// Conns is how many connections Spread has made.
func (s *Spread) Conns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// Readers is how many Readers the connections carry.
func (s *Spread) Readers() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.conns {
		n += c.readers
	}
	return n
}

// OrderedConsumer makes the consumer on a connection with room for one more Reader; the
// room is given back once its Consume stops (or fails, or is never called: see
// spreadConsumer).
func (s *Spread) OrderedConsumer(ctx context.Context, stream string, cfg jetstream.OrderedConsumerConfig) (jetstream.Consumer, error) {
	c, err := s.take()
	if err != nil {
		return nil, err
	}
	cons, err := c.js.OrderedConsumer(ctx, stream, cfg)
	if err != nil {
		s.give(c)
		return nil, err
	}
	return &spreadConsumer{Consumer: cons, give: sync.OnceFunc(func() { s.give(c) })}, nil
}

// take returns a connection with room for one more Reader, counting it there.
func (s *Spread) take() (*spreadConn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, nats.ErrConnectionClosed
	}
	for _, c := range s.conns {
		if c.readers < s.per {
			c.readers++
			return c, nil
		}
	}
	js, err := s.connect()
	if err != nil {
		if len(s.conns) == 0 {
			return nil, err
		}
		// No more connections (an account's max_connections, say): a Reader on a full
		// one risks a slow consumer's cut-off and a reconnect, one not reading stops its
		// partition.
		c := slices.MinFunc(s.conns, func(a, b *spreadConn) int { return cmp.Compare(a.readers, b.readers) })
		if !s.warned {
			s.warned = true
			s.log.Warn("cannot open another NATS connection for the partitions' readers; they share those open, and NATS may cut one off as a slow consumer", "connections", len(s.conns), "readers", c.readers+1, "err", err)
		}
		c.readers++
		return c, nil
	}
	c := &spreadConn{js: js, readers: 1}
	s.conns = append(s.conns, c)
	return c, nil
}

// connect makes a connection for Readers.
func (s *Spread) connect() (jetstream.JetStream, error) {
	nc, err := s.dial()
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return js, nil
}

func (s *Spread) give(c *spreadConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c.readers--
}

// Close closes the connections Spread made; a Reader still on one stops.
func (s *Spread) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, c := range s.conns {
		c.js.Conn().Close()
	}
}

// spreadConsumer gives its connection's room back when its Consume stops. Readers call
// Consume once, at once, and read no other way: a consumer made and never consumed, or
// read with Fetch or Messages, holds its room until Spread is closed.
type spreadConsumer struct {
	jetstream.Consumer
	give func()
}

func (c *spreadConsumer) Consume(handler jetstream.MessageHandler, opts ...jetstream.PullConsumeOpt) (jetstream.ConsumeContext, error) {
	cc, err := c.Consumer.Consume(handler, opts...)
	if err != nil {
		c.give()
		return nil, err
	}
	go func() {
		<-cc.Closed()
		c.give()
	}()
	return cc, nil
}
