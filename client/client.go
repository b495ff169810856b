package client

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/tally-dev/tally/pipeline"
)

// Client talks to Tally over one NATS connection. It is safe for concurrent use.
type Client struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	subj    pipeline.Subjects
	timeout time.Duration
	// partitions is the partition count batches are split by: set by WithPartitions, or
	// read from the events stream by the first PublishBatch, which may run beside others.
	partitions atomic.Int64
	replies    *replies // of its requests
	// direct: gets ask the processes serving their partitions (where.go), where learns
	// which those are.
	direct bool
	where  where
}

// Option configures a Client.
type Option func(*Client) error

// WithPrefix sets the subject prefix (default "tally").
func WithPrefix(p string) Option {
	return func(c *Client) error { c.subj = pipeline.NewSubjects(p); return nil }
}

// WithPartitions sets the partition count used to split batches; by default the client
// reads it from the events stream.
func WithPartitions(n int) Option {
	return func(c *Client) error {
		if n < 1 {
			return fmt.Errorf("partitions must be positive, not %d", n)
		}
		c.partitions.Store(int64(n))
		return nil
	}
}

// WithTimeout bounds a request, and the wait for a publish's acknowledgements, when the
// context has no deadline (default 5s).
func WithTimeout(d time.Duration) Option {
	return func(c *Client) error { c.timeout = d; return nil }
}

// WithDirectGets sets whether a get asks the tallyd processes serving its ids'
// partitions itself, each once and all at once, once it has learned which those are
// (default true; tallyd 1.9, see docs/protocol.md). Off, every get is asked on
// <prefix>.get.<family>, and the tallyd it reaches asks the others: turn it off where
// the client's user may not publish to <prefix>.get.*.at.* (deploy/README.md).
func WithDirectGets(on bool) Option {
	return func(c *Client) error { c.direct = on; return nil }
}

// New returns a client on nc.
func New(nc *nats.Conn, opts ...Option) (*Client, error) {
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(8192))
	if err != nil {
		return nil, err
	}
	c := &Client{nc: nc, js: js, subj: pipeline.NewSubjects(""), timeout: 5 * time.Second, replies: &replies{nc: nc}, direct: true}
	for _, o := range opts {
		if err := o(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Conn returns the NATS connection the client uses.
func (c *Client) Conn() *nats.Conn { return c.nc }

// Subjects returns the subjects the client uses.
func (c *Client) Subjects() pipeline.Subjects { return c.subj }

// NewTx returns a fresh transaction id. Give an event the same tx on every retry of the
// same action, so that Tally counts it once.
func NewTx() string { return nuid.Next() }

// Publish publishes events one message each, with Nats-Msg-Id = the event's tx (a new
// one when empty), and returns when all are stored. Events of one key (a user's like and
// unlike) are stored in the order given (see publishInOrder). On an error (or ctx ending
// first) some of them may have been stored: resend the same events with the same tx to
// be sure, which counts none twice within the duplicate window. Set Tx yourself if you
// may retry.
func (c *Client) Publish(ctx context.Context, events ...pipeline.Event) error {
	msgs := make([]outMsg, len(events))
	for i := range events {
		e := events[i]
		if !pipeline.ValidType(e.Type) {
			return fmt.Errorf("%w: event %d: unknown type %q", pipeline.ErrBadEvent, i, e.Type)
		}
		if e.Tx == "" {
			e.Tx = NewTx()
		}
		msgs[i] = outMsg{lane: uint64(e.Key()), subj: c.subj.Event(e.Type, e.Key()), data: pipeline.AppendEvent(nil, &e), id: e.Tx}
	}
	return c.publishInOrder(ctx, msgs)
}

// outMsg is a message publishInOrder sends: those of one lane in the order given.
type outMsg struct {
	lane     uint64
	subj, id string
	data     []byte
}

// publishInOrder publishes msgs, each with Nats-Msg-Id id, and returns when all are
// stored, within the client's timeout when ctx has no deadline: a message published
// while NATS is away (a server killed, a connection reconnecting) may never be answered.
// The messages of one lane go one at a time, each once the one before is stored; those
// of different lanes at once. nats.go sends a publish answered "no responders" (a stream
// leader being elected) again 250 ms later, behind the messages sent after it: two
// messages of one partition sent together could be stored the other way round, a like
// applied after its unlike (TestPublishKeepsOrder).
func (c *Client) publishInOrder(ctx context.Context, msgs []outMsg) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	rank := make([]int, len(msgs)) // a message's place in its lane
	seen := map[uint64]int{}
	rounds := 0
	for i, m := range msgs {
		rank[i] = seen[m.lane]
		seen[m.lane]++
		rounds = max(rounds, seen[m.lane])
	}
	futures := make([]jetstream.PubAckFuture, len(msgs))
	for r := range rounds {
		for i, m := range msgs {
			if rank[i] != r {
				continue
			}
			f, err := c.js.PublishAsync(m.subj, m.data, jetstream.WithMsgID(m.id))
			if err != nil {
				return fmt.Errorf("cannot publish message %d: %w", i, err)
			}
			futures[i] = f
		}
		for i, f := range futures {
			if rank[i] != r {
				continue
			}
			select {
			case <-f.Ok():
			case err := <-f.Err():
				return fmt.Errorf("message %d not stored: %w", i, err)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return nil
}

// PublishBatch publishes events as few batch messages as partitions allow: one per
// partition, each deduplicated as a whole by the message id tx.<partition>. Re-sending
// the same events with the same tx counts them once — which is also what to do after an
// error, when some of the messages may already have been stored. This is the fast path.
// A partition's messages (more than pipeline.MaxBatch events, or privileged ones) are
// stored in the order of their events (see publishInOrder).
func (c *Client) PublishBatch(ctx context.Context, tx string, events []pipeline.Event) error {
	if tx == "" {
		return fmt.Errorf("%w: a batch needs a transaction id", pipeline.ErrBadEvent)
	}
	n, err := c.Partitions(ctx)
	if err != nil {
		return err
	}
	// One message per partition, and one more for the privileged events (system, incr),
	// which only an admin batch may carry, each written from the events where they lie,
	// in their order: copying the batch into groups to write them took two fifths of
	// this function's CPU in a profile, and an allocation the size of the batch.
	type group struct {
		p     int
		admin bool
	}
	index := make([]int32, 2*n) // a group's place in order, +1: partition p's at 2p, its admin batch's at 2p+1
	var order []group
	of := make([]int32, len(events)) // each event's group
	var starts []int32               // each group's start in byGroup, once counted
	for i := range events {
		e := &events[i]
		if !pipeline.ValidType(e.Type) {
			return fmt.Errorf("%w: unknown type %q", pipeline.ErrBadEvent, e.Type)
		}
		g := group{pipeline.PartitionOf(e.Key(), n), e.Privileged()}
		at := 2 * g.p
		if g.admin {
			at++
		}
		k := index[at] - 1
		if k < 0 {
			k = int32(len(order))
			index[at], order, starts = k+1, append(order, g), append(starts, 0)
		}
		of[i] = k
		starts[k]++
	}
	var at int32
	for k, size := range starts {
		starts[k], at = at, at+size
	}
	byGroup := make([]int32, len(events)) // the events' indexes, group by group, each in order
	next := slices.Clone(starts)
	for i, k := range of {
		byGroup[next[k]] = int32(i)
		next[k]++
	}
	var msgs []outMsg
	for k, gr := range order {
		g := byGroup[starts[k]:next[k]]
		for part := 0; len(g) > 0; part++ {
			k := min(len(g), pipeline.MaxBatch)
			data := pipeline.AppendBatchHead(make([]byte, 0, 64*k), k)
			for _, i := range g[:k] {
				data = pipeline.AppendEvent(data, &events[i])
			}
			typ, id := pipeline.TypeBatch, pipeline.BatchMsgID(tx, gr.p, part)
			if gr.admin {
				typ, id = pipeline.TypeAdminBatch, pipeline.AdminBatchMsgID(tx, gr.p, part)
			}
			msgs = append(msgs, outMsg{lane: uint64(gr.p), subj: c.subj.Event(typ, events[g[0]].Key()), data: data, id: id})
			g = g[k:]
		}
	}
	return c.publishInOrder(ctx, msgs)
}

var partitionsIn = regexp.MustCompile(`\{\{\s*partition\((\d+)`)

// Partitions returns the partition count, read once from the events stream (callers
// that race to read it first each read the same count).
func (c *Client) Partitions(ctx context.Context) (int, error) {
	if n := c.partitions.Load(); n > 0 {
		return int(n), nil
	}
	st, err := c.js.Stream(ctx, c.subj.EventsStream())
	if err != nil {
		return 0, fmt.Errorf("cannot read stream %s (is tallyd running?): %w", c.subj.EventsStream(), err)
	}
	tr := st.CachedInfo().Config.SubjectTransform
	if tr == nil {
		return 0, fmt.Errorf("stream %s has no partitioning transform", c.subj.EventsStream())
	}
	m := partitionsIn.FindStringSubmatch(tr.Destination)
	if m == nil {
		return 0, fmt.Errorf("stream %s: cannot read the partition count from %q", c.subj.EventsStream(), tr.Destination)
	}
	n, err := strconv.Atoi(m[1])
	if err != nil || n < 1 {
		return 0, fmt.Errorf("stream %s: partition count %q", c.subj.EventsStream(), m[1])
	}
	c.partitions.Store(int64(n))
	return n, nil
}
