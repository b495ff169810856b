package pipeline

import (
	"fmt"
	"math"
)

// Op says how a delta changes a counter.
type Op uint8

const (
	// OpAdd adds N (never going below zero).
	OpAdd Op = iota
	// OpSet sets the counter to N (a read resets an unread counter to 0).
	OpSet
)

// Delta is one change to one counter of one id.
type Delta struct {
	ID    uint64
	Field uint8
	Op    Op
	N     int64
}

// Then returns the single delta equivalent to d followed by next on the same counter
// whatever the counter holds before them, and whether there is one. Counters never go
// below zero (an add saturates at 0), so that exists only where merging is exact for
// every starting value: adds of the same sign (+1 then +2 is +3, -1 then -2 is -3), set v
// then add n (set max(v+n, 0)), anything then set v (set v). An add after an add of the
// other sign is not: -5 then +5 leaves 5 on a counter at 2 but 7 on one at 7, where +0
// would leave 2 and 7; such deltas stay apart, applied in order.
func (d Delta) Then(next Delta) (Delta, bool) {
	switch {
	case next.Op == OpSet:
		return next, true
	case d.Op == OpSet:
		d.N = max(max(d.N, 0)+next.N, 0) // a set below zero sets 0
		return d, true
	case d.N == 0 || next.N == 0 || (d.N < 0) == (next.N < 0):
		d.N += next.N
		return d, true
	default:
		return d, false
	}
}

// DeltaBatch is the payload of one message on tally.delta.<family>.<p>: the coalesced
// deltas one event-stage partition (Source) produced for one counter partition in one
// transaction. Seq counts the batches from Source to that counter partition 1, 2, 3, …
// without gaps, so a counter worker can tell an already applied batch from a new one
// forever, not only inside the stream's duplicate window.
type DeltaBatch struct {
	Source uint32
	Seq    uint64
	Deltas []Delta
	// Windows are the same transaction's changes by the minute of the events that made
	// them, for the windowed counts; empty when windows are off.
	Windows []WindowDelta
}

// WindowDelta is the net change the events of one minute made to one counter of one
// id: an add of N (a like +1, an unlike -1) at Minute (Unix minutes of the event's
// time). Sets (a read resetting unread) make none: a window counts what events added.
type WindowDelta struct {
	ID     uint64
	Field  uint8
	Minute uint32
	N      int64
}

// The internal wire form is a MessagePack array [source, seq, [id, field, op, n, …]]:
// deltas are the highest-volume messages and never leave Tally, so they carry no names.
// A batch with windows has a fourth element, [id, field, minute, n, …]: a reader
// without windows (before 1.4) refuses such a batch as undecodable, so a cluster turns
// windows on only once every tallyd runs 1.4 (docs/operations.md).

// AppendDeltaBatch appends the encoded batch to dst, byte for byte as msgpack.Encoder
// writes it (every integer in its most compact form).
func AppendDeltaBatch(dst []byte, b *DeltaBatch) []byte {
	if len(b.Windows) > 0 {
		dst = appendArrayLen(dst, 4)
	} else {
		dst = appendArrayLen(dst, 3)
	}
	dst = appendUint(appendUint(dst, uint64(b.Source)), b.Seq)
	dst = appendArrayLen(dst, 4*len(b.Deltas))
	for _, d := range b.Deltas {
		dst = appendInt(appendUint(appendUint(appendUint(dst, d.ID), uint64(d.Field)), uint64(d.Op)), d.N)
	}
	if len(b.Windows) > 0 {
		dst = appendArrayLen(dst, 4*len(b.Windows))
		for _, w := range b.Windows {
			dst = appendInt(appendUint(appendUint(appendUint(dst, w.ID), uint64(w.Field)), uint64(w.Minute)), w.N)
		}
	}
	return dst
}

// Size is the length of b's encoding, so that AppendDeltaBatch can write it into one
// allocation of the size it needs.
func (b *DeltaBatch) Size() int {
	n := 1 + uintSize(uint64(b.Source)) + uintSize(b.Seq) + arrayLenSize(4*len(b.Deltas))
	for _, d := range b.Deltas {
		n += uintSize(d.ID) + uintSize(uint64(d.Field)) + uintSize(uint64(d.Op)) + intSize(d.N)
	}
	if len(b.Windows) > 0 {
		n += arrayLenSize(4 * len(b.Windows))
		for _, w := range b.Windows {
			n += uintSize(w.ID) + uintSize(uint64(w.Field)) + uintSize(uint64(w.Minute)) + intSize(w.N)
		}
	}
	return n
}

// DecodeDeltaBatch decodes into b, reusing b.Deltas and b.Windows. It reads the payload
// in place (mpReader) and accepts what msgpack.Decoder did (TestDeltaBatchCodecs).
func DecodeDeltaBatch(data []byte, b *DeltaBatch) error {
	r := mpReader{b: data}
	return r.done(r.readDeltaBatch(b))
}

func (r *mpReader) readDeltaBatch(b *DeltaBatch) error {
	n, err := r.arrayLen()
	if err != nil || (n != 3 && n != 4) {
		return fmt.Errorf("delta batch: want a 3- or 4-element array (len %d): %v", n, err)
	}
	parts := n
	src, err := r.uint64()
	if err != nil {
		return fmt.Errorf("delta batch source: %w", err)
	}
	if b.Seq, err = r.uint64(); err != nil {
		return fmt.Errorf("delta batch seq: %w", err)
	}
	b.Source = uint32(src) // as Decoder.DecodeUint32 took it
	if n, err = r.arrayLen(); err != nil || n < 0 || n%4 != 0 {
		return fmt.Errorf("delta batch: bad delta list (len %d): %v", n, err)
	}
	b.Deltas = b.Deltas[:0]
	for range n / 4 {
		var x Delta
		var f, op uint64
		if x.ID, err = r.uint64(); err == nil {
			if f, err = r.uint64(); err == nil {
				if op, err = r.uint64(); err == nil {
					x.N, err = r.int64()
				}
			}
		}
		if err != nil {
			return fmt.Errorf("delta batch: %w", err)
		}
		if f > 255 || op > uint64(OpSet) {
			return fmt.Errorf("delta batch: field %d or op %d out of range", f, op)
		}
		x.Field, x.Op = uint8(f), Op(op)
		b.Deltas = append(b.Deltas, x)
	}
	b.Windows = b.Windows[:0]
	if parts == 4 {
		return r.readWindows(b)
	}
	return nil
}

func (r *mpReader) readWindows(b *DeltaBatch) error {
	n, err := r.arrayLen()
	if err != nil || n < 0 || n%4 != 0 {
		return fmt.Errorf("delta batch: bad window list (len %d): %v", n, err)
	}
	for range n / 4 {
		var x WindowDelta
		var f, m uint64
		if x.ID, err = r.uint64(); err == nil {
			if f, err = r.uint64(); err == nil {
				if m, err = r.uint64(); err == nil {
					x.N, err = r.int64()
				}
			}
		}
		if err != nil {
			return fmt.Errorf("delta batch windows: %w", err)
		}
		if f > 255 || m > math.MaxUint32 {
			return fmt.Errorf("delta batch windows: field %d or minute %d out of range", f, m)
		}
		x.Field, x.Minute = uint8(f), uint32(m)
		b.Windows = append(b.Windows, x)
	}
	return nil
}
