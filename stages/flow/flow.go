// Package flow is the JetStream plumbing the stages share: reading one partition's
// subject from a stored position, and telling how far a position is behind its stream.
package flow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline/backoff"
)

// Reader delivers the messages of one filtered subject in stream order.
type Reader struct {
	C    <-chan jetstream.Msg
	cc   jetstream.ConsumeContext
	stop context.CancelFunc
	// arrived is ready once a message was put on C since it was last received from
	// (Arrived).
	arrived chan struct{}
	// What it delivered past its user's position, once a Meter tracks it.
	ahead ahead
}

// Gaps counts the times a reader was delivered a message with stored messages of its
// subject before it, after the one it was delivered last (or its start position), that
// it was never delivered: messages a stage would have passed over without applying them.
// Each consumer under an ordered one (the first, and each made again after a fault)
// starts where the last left off, and is checked there against the stream's leader.
var Gaps atomic.Int64

// Buffer bounds what a Reader holds that its user has not taken: at most Msgs messages
// and Bytes bytes of payload on C (one message alone always fits, whatever its size),
// and as many bytes again pulled from the stream and not on C yet — or the largest
// payload its connection takes, when more (the least the server must be let send; pulls
// of one small payload each drained TestLostPublishesNeverGiveAGapUp's backlog of tiny
// messages over five times slower). Bytes of 0 is DefaultBufferBytes. Counted in
// messages alone, as it was, a reader draining a backlog of batches of a thousand events
// held up to a thousand of them: ~60 MB for each event partition.
type Buffer struct {
	Msgs, Bytes int
}

// DefaultBufferBytes is a Buffer's bytes when not given.
const DefaultBufferBytes = 1 << 20

// Read starts an ordered consumer on stream for filter, beginning after position pos.
// Ordered consumers need no acks and no server-side durable state: the position a stage
// commits with its own state is the only truth about what it has consumed. While NATS
// refuses it the consumer, Read tries again until ctx ends, and says why on log (nil:
// nowhere) once it has tried for readPatience, and every readRepeat after.
func Read(ctx context.Context, js jetstream.JetStream, stream, filter string, pos uint64, buf Buffer, log *slog.Logger) (r *Reader, err error) {
	// Its goroutines (and a Spread's connection made for it) carry no profile labels:
	// they outlive the role of the stage that asked, or are shared (Label).
	unlabelled(func() { r, err = read(ctx, js, stream, filter, pos, buf, log, readInactive) })
	return r, err
}

// readInactive is how long NATS keeps a Reader's consumer once no pull of it is
// waiting: a reader whose process died (or whose connection is cut) leaves its consumer
// that long. nats.go's default is 5 minutes, and nats-server caps a stream at 1 000
// consumers unless told otherwise (its default_max_consumers, in 2.15): a process killed
// every few seconds left so many on TALLY_DELTAS that no new reader could be made —
// "maximum consumers limit reached" — for minutes (TestChaosCluster, NATS cluster,
// seed 41, 12-01: eight counter partitions stuck). A live Reader always has a pull
// waiting, or, blocked longer than its pull lasts (30 s), has its consumer made again
// from where it was by the ordered consumer.
const readInactive = 30 * time.Second

// readPatience is how long Read tries for a consumer before it says so, and readRepeat
// how often it says so again: a partition that cannot read does not move, and an
// operator must be told why (a stream without a leader, NATS refusing consumers).
const (
	readPatience = 10 * time.Second
	readRepeat   = 30 * time.Second
)

func read(ctx context.Context, js jetstream.JetStream, stream, filter string, pos uint64, buf Buffer, log *slog.Logger, inactive time.Duration) (*Reader, error) {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}, DeliverPolicy: jetstream.DeliverAllPolicy, InactiveThreshold: inactive}
	if pos > 0 {
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = pos + 1
	}
	if buf.Bytes <= 0 {
		buf.Bytes = DefaultBufferBytes
	}
	// NATS away (restarting, a stream electing its leader) is no reason for a partition
	// to stop: try again, with backoff, until ctx ends.
	var cons jetstream.Consumer
	var st jetstream.Stream
	var err error
	begun, said := time.Now(), time.Time{}
	for wait := backoff.New(50*time.Millisecond, 2*time.Second); ; {
		if st, err = js.Stream(ctx, stream); err == nil {
			if cons, err = js.OrderedConsumer(ctx, stream, cfg); err == nil {
				break
			}
		}
		if log != nil && time.Since(begun) >= readPatience && time.Since(said) >= readRepeat && ctx.Err() == nil {
			said = time.Now()
			log.Warn("cannot read a stream yet; trying again", "stream", stream, "subject", filter, "for", time.Since(begun).Round(time.Second), "err", err)
		}
		if wait.Wait(ctx) != nil {
			return nil, fmt.Errorf("cannot read %s from %s: %w", filter, stream, err)
		}
	}
	ctx, stop := context.WithCancel(ctx)
	ch := make(chan jetstream.Msg, max(buf.Msgs, 1))
	r := &Reader{C: ch, stop: stop, ahead: ahead{last: pos}, arrived: make(chan struct{}, 1)}
	held := onChan{max: buf.Bytes}
	var mu sync.Mutex // a consumer made again may deliver while the last one's delivery waits
	cc, err := cons.Consume(func(m jetstream.Msg) {
		mu.Lock()
		defer mu.Unlock()
		// Once stopping, nothing more: a message dropped below must not be followed by
		// one delivered after it, or a reader would apply the later one, commit its
		// position and so skip the dropped one for good. C delivers a gap-free prefix.
		if ctx.Err() != nil {
			return
		}
		md, err := m.Metadata()
		if err != nil { // never from JetStream: then only the stream tells a lag
			r.ahead.blind()
		} else {
			last := r.ahead.note(md)
			if md.Sequence.Consumer == 1 && skipped(ctx, st, filter, last, md.Sequence.Stream) {
				Gaps.Add(1)
			}
			m = parsed{m, md}
		}
		if !held.wait(ctx, ch, len(m.Data())) {
			return
		}
		select {
		case ch <- m:
		case <-ctx.Done():
			return
		}
		select {
		case r.arrived <- struct{}{}:
		default: // told already
		}
	}, jetstream.PullMaxBytes(pullBytes(js, buf.Bytes)))
	if err != nil {
		stop()
		return nil, fmt.Errorf("cannot consume %s: %w", filter, err)
	}
	r.cc = cc
	return r, nil
}

// pullBytes is what a Reader of js with a buffer of bufBytes pulls at most: as much
// again as its buffer, or the largest payload js's connection takes, when more.
func pullBytes(js jetstream.JetStream, bufBytes int) int {
	return max(bufBytes, int(maxPayload(js)))
}

// maxPayload is the largest message js's connection may be sent (1 MiB, NATS's default,
// when it cannot tell).
func maxPayload(js jetstream.JetStream) int64 {
	if nc := js.Conn(); nc != nil {
		if n := nc.MaxPayload(); n > 0 {
			return n
		}
	}
	return 1 << 20
}

// onChan tells the bytes of the messages a Reader's handler sent on C that its user
// has not taken yet: the sizes sent, oldest first, of which those past len(C) were taken
// (the user takes in order, and only the handler sends).
type onChan struct {
	max   int
	sizes []int
	head  int
	bytes int // of sizes[head:]
}

// wait returns once a message of n bytes fits on ch with those still on it (at once on
// an empty ch), recording it as sent; false if ctx ended first. The user takes from ch
// without telling: wait looks again every while.
func (h *onChan) wait(ctx context.Context, ch chan jetstream.Msg, n int) bool {
	for pause := 20 * time.Microsecond; ; pause = min(2*pause, 5*time.Millisecond) {
		on := len(ch)
		for len(h.sizes)-h.head > on {
			h.bytes -= h.sizes[h.head]
			h.head++
		}
		if on == 0 || h.bytes+n <= h.max {
			break
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(pause):
		}
	}
	if h.head > len(h.sizes)/2 { // keep the slice from growing with what was taken
		h.sizes = h.sizes[:copy(h.sizes, h.sizes[h.head:])]
		h.head = 0
	}
	h.sizes = append(h.sizes, n)
	h.bytes += n
	return true
}

// parsed is a delivered message with the metadata its reader parsed from its reply
// subject: a stage asks a message's sequence and time several times, and each
// jetstream.Msg.Metadata parses the subject again and allocates.
type parsed struct {
	jetstream.Msg
	md *jetstream.MsgMetadata
}

// Metadata returns the metadata parsed on delivery; it is shared, not to be changed.
func (m parsed) Metadata() (*jetstream.MsgMetadata, error) { return m.md, nil }

// skipped reports whether the stream's leader holds a message of filter after last and
// before seq, the first one a new consumer delivered. Not knowing (the leader does not
// answer) is not a gap.
func skipped(ctx context.Context, st jetstream.Stream, filter string, last, seq uint64) bool {
	if seq <= last+1 {
		return false
	}
	gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	m, err := st.GetMsg(gctx, last+1, jetstream.WithGetMsgSubject(filter))
	return err == nil && m.Sequence < seq
}

// Stop stops delivery; messages not taken from C are delivered again after a restart.
func (r *Reader) Stop() {
	r.stop()
	r.cc.Stop()
}

// Arrived is ready once a message was put on C since Arrived was last received from: a
// user waiting on something else as well (an outbox's acknowledgements) stops for it.
// It may be ready with C empty again (taken already); a message on C before the first
// receive from Arrived made it ready.
func (r *Reader) Arrived() <-chan struct{} { return r.arrived }

// Drain appends to batch every message already waiting on C, up to max in all.
func (r *Reader) Drain(batch []jetstream.Msg, max int) []jetstream.Msg {
	for len(batch) < max {
		select {
		case m := <-r.C:
			batch = append(batch, m)
		default:
			return batch
		}
	}
	return batch
}

// LastSeq returns the stream sequence of the newest message on filter (0 if none).
func LastSeq(ctx context.Context, js jetstream.JetStream, stream, filter string) (uint64, error) {
	m, err := Last(ctx, js, stream, filter)
	if m == nil {
		return 0, err
	}
	return m.Sequence, nil
}

// Last returns the newest message on filter (nil if none).
func Last(ctx context.Context, js jetstream.JetStream, stream, filter string) (*jetstream.RawStreamMsg, error) {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	m, err := st.GetLastMsgForSubject(ctx, filter)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	return m, err
}

// PurgeBelow drops the messages on subject of stream st below sequence seq, keeping seq
// itself (it may be the subject's last, which the next append with an expected last
// sequence names).
func PurgeBelow(ctx context.Context, st jetstream.Stream, subject string, seq uint64) error {
	if seq <= 1 {
		return nil
	}
	return st.Purge(ctx, jetstream.WithPurgeSubject(subject), jetstream.WithPurgeSequence(seq))
}

// Fenced reports a publish or KV write refused because the subject's last sequence was
// not the one expected: someone else wrote it.
func Fenced(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, jetstream.ErrKeyExists) || errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
