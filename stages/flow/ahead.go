package flow

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ahead is what a Reader delivered that its user has not applied yet, recorded once a
// Meter tracks the reader (Meter.Track), so that a lagging reader's lag is told without
// asking the stream. It holds at most what the reader delivered past the user's
// position: its buffer and the messages the user has taken and not applied.
type ahead struct {
	mu      sync.Mutex
	applied *atomic.Uint64 // the user's position; nil until tracked, when nothing is recorded
	from    uint64         // the last sequence delivered before tracking began
	last    uint64         // the last sequence delivered (the start position before any)
	q       []delivered    // delivered after from, in stream order; q[head:] not known applied
	head    int
	pending uint64 // the NumPending of the last message delivered
	unsure  bool   // a message was delivered that could not be recorded
}

// delivered is a message a Reader delivered: its stream sequence and when it was stored.
type delivered struct {
	seq uint64
	ts  time.Time
}

// track starts recording what is delivered from now on, for a user at position applied.
func (a *ahead) track(applied *atomic.Uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.applied, a.from, a.q, a.head = applied, a.last, a.q[:0], 0
}

// note records md's message as delivered, and forgets those applied; it returns the
// sequence delivered before it (the reader's start position before any), which the
// reader checks for a gap.
func (a *ahead) note(md *jetstream.MsgMetadata) (last uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	last, a.last = a.last, md.Sequence.Stream
	if a.applied == nil {
		return last
	}
	a.forget(a.applied.Load())
	a.q = append(a.q, delivered{md.Sequence.Stream, md.Timestamp})
	a.pending = md.NumPending
	return last
}

// blind leaves every lag to the stream: a message was delivered unrecorded.
func (a *ahead) blind() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.unsure = true
}

// forget drops what was delivered up to pos; a.mu is held.
func (a *ahead) forget(pos uint64) {
	for a.head < len(a.q) && a.q[a.head].seq <= pos {
		a.head++
	}
	if a.head > len(a.q)/2 { // keep the slice from growing with what it dropped
		a.q = a.q[:copy(a.q, a.q[a.head:])]
		a.head = 0
	}
}

// behind tells how far a user at position pos is behind, as of now, from what the reader
// delivered past pos, without asking the stream; ok is false when the reader cannot
// tell: not tracked (Meter.Track), or it delivered nothing past pos (caught
// up, or the next message not delivered yet), which only the stream can tell. Age is
// exact: the first message delivered past pos is the oldest not applied, since a Reader
// delivers every message of its subject in order. Msgs is the sequences from pos to the
// last message delivered, plus the messages the stream held after that one when it was
// delivered: the newest message's sequence less pos, unless more came since, and so at
// least that.
func (a *ahead) behind(pos uint64, now time.Time) (Behind, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.applied == nil || a.unsure || pos < a.from { // what came after pos is not all recorded
		return Behind{}, false
	}
	a.forget(pos)
	if a.head == len(a.q) {
		return Behind{}, false
	}
	first, last := a.q[a.head], a.q[len(a.q)-1]
	return Behind{Msgs: last.seq - pos + a.pending, Age: max(now.Sub(first.ts), 0), Pos: pos}, true
}
