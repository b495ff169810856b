package hop

import (
	"cmp"
	"log/slog"
	"slices"
	"sync/atomic"

	"github.com/tally-dev/tally/store/cold"
)

// Defaults of In.
const (
	// DefaultMaxHeld is the most batches held above a gap per source: a sender keeps
	// within Window of its oldest unstored entry, so more is never a gap that can fill.
	DefaultMaxHeld = Window
	// DefaultMaxHeldBytes bounds the payloads held by one In over all its sources. They
	// are rewritten with the destination's state at every commit while a gap lasts, and
	// held in RAM. (A state value past Badger's value threshold, 1 MiB, goes to its value
	// log and counts as a pointer towards the transaction's size limit, so the bound is
	// one of cost, not of what a transaction accepts.) A sender has at most its outbox's
	// MaxInflight messages above a publish being retried: a gap that fills is far below it.
	DefaultMaxHeldBytes = 32 << 20
)

// InStats counts what a receiver did; safe to read from any goroutine and shareable by
// the receivers of many destinations.
type InStats struct {
	Dups        atomic.Int64 // batches skipped as applied (or held) already
	Held        atomic.Int64 // batches held above a gap now
	GapsSkipped atomic.Int64 // gaps given up because too much was held above them
}

// In is the receiving end of every channel into one destination. It applies each
// source's batches strictly in its gap-free order, exactly once: a batch above a gap is
// held until the gap fills, a batch at or below the mark is a duplicate however late it
// comes. Only the destination's goroutine may call it.
type In struct {
	// Marks is what has been applied and held, by source. The caller persists it with
	// the state the applied batches changed, in one transaction, so a crash neither loses
	// a held batch nor applies one twice.
	Marks map[uint32]*cold.Mark
	// MaxHeld is the most batches held per source (DefaultMaxHeld when 0).
	MaxHeld int
	// MaxHeldBytes bounds the payloads held over all sources (DefaultMaxHeldBytes when 0).
	MaxHeldBytes int
	Stats        *InStats // nil: not counted
	Log          *slog.Logger

	ready   [][]byte // what Accept returns, reused: a batch per call is the common case
	counted bool     // the held batches of Marks are in bytes, held and Stats.Held
	bytes   int      // payload bytes held over all sources
	held    int      // batches held over all sources
}

// Accept takes batch seq of src. It returns the payloads to apply now, in order (data
// itself when seq is next, followed by any held batches it unblocks; none when seq is
// above a gap: data is copied and held), or dup=true for a batch applied (or held)
// already. A source whose held batches pass MaxHeld (or all held payloads MaxHeldBytes)
// gives up its oldest gap: logged at error with the missing range, counted in
// GapsSkipped, and the held batches are released in order.
//
// The returned slices are valid until the next call; the marks already count them as
// applied, so the caller applies all of them or none (and then stops without persisting
// the marks).
func (in *In) Accept(src uint32, seq uint64, data []byte) (ready [][]byte, dup bool) {
	in.count()
	if in.Marks == nil {
		in.Marks = map[uint32]*cold.Mark{}
	}
	m := in.Marks[src]
	if m == nil {
		m = &cold.Mark{}
		in.Marks[src] = m
	}
	if seq <= m.Through || slices.Contains(m.Above, seq) || heldAt(m, seq) >= 0 {
		if in.Stats != nil {
			in.Stats.Dups.Add(1)
		}
		return nil, true
	}
	if seq == m.Through+1 {
		m.Through = seq
		clear(in.ready)
		in.ready = in.release(m, append(in.ready[:0], data))
		return in.ready, false
	}
	i, _ := slices.BinarySearchFunc(m.Held, seq, bySeq)
	m.Held = slices.Insert(m.Held, i, cold.Held{Seq: seq, Data: slices.Clone(data)})
	in.hold(1, len(data))
	for len(m.Held) > 0 && (len(m.Held) > in.maxHeld() || in.bytes > in.maxHeldBytes()) {
		if ready == nil {
			clear(in.ready)
			ready = in.ready[:0]
		}
		ready = in.skipGap(src, m, ready)
		in.ready = ready
	}
	return ready, false
}

// Held returns the batches and payload bytes held now over all sources.
func (in *In) Held() (batches, bytes int) {
	in.count()
	return in.held, in.bytes
}

// Close takes the batches this In holds out of Stats.Held: the destination stops (its
// marks stay persisted and are counted again by whoever loads them).
func (in *In) Close() {
	if in.counted && in.Stats != nil {
		in.Stats.Held.Add(-int64(in.held))
	}
	in.counted, in.held, in.bytes = false, 0, 0
}

// count accounts, once, for the batches held in Marks as loaded from a checkpoint.
func (in *In) count() {
	if in.counted {
		return
	}
	in.counted = true
	for _, m := range in.Marks {
		for _, h := range m.Held {
			in.hold(1, len(h.Data))
		}
	}
}

func (in *In) hold(batches, bytes int) {
	in.held += batches
	in.bytes += bytes
	if in.Stats != nil {
		in.Stats.Held.Add(int64(batches))
	}
}

// release moves Through over every batch that is next, appending held payloads to ready
// in order. Legacy Above entries were applied by older code: they are passed over.
func (in *In) release(m *cold.Mark, ready [][]byte) [][]byte {
	n := 0
	for {
		if n < len(m.Held) && m.Held[n].Seq == m.Through+1 {
			ready = append(ready, m.Held[n].Data)
			in.hold(-1, -len(m.Held[n].Data))
			m.Through++
			n++
			continue
		}
		if i := slices.Index(m.Above, m.Through+1); i >= 0 {
			m.Above = slices.Delete(m.Above, i, i+1)
			m.Through++
			continue
		}
		break
	}
	// Trimmed in place: the released payloads stay reachable through ready only.
	m.Held = slices.Delete(m.Held, 0, n)
	if len(m.Held) == 0 {
		m.Held = nil
	}
	if len(m.Above) == 0 {
		m.Above = nil
	}
	return ready
}

// skipGap gives up the gap below the oldest held batch of m: whatever was missing there
// is taken as lost (its sender's outbox gave up on it), so the batches above it can be
// applied rather than held for ever.
func (in *In) skipGap(src uint32, m *cold.Mark, ready [][]byte) [][]byte {
	first := m.Held[0].Seq
	for _, a := range m.Above {
		first = min(first, a)
	}
	if in.Log != nil {
		in.Log.Error("gave up a gap in a hop: batches missing, the ones above it are applied",
			"source", src, "missing_from", m.Through+1, "missing_to", first-1,
			"held", len(m.Held), "held_bytes", in.bytes)
	}
	if in.Stats != nil {
		in.Stats.GapsSkipped.Add(1)
	}
	m.Through = first - 1
	return in.release(m, ready)
}

func (in *In) maxHeld() int {
	if in.MaxHeld > 0 {
		return in.MaxHeld
	}
	return DefaultMaxHeld
}

func (in *In) maxHeldBytes() int {
	if in.MaxHeldBytes > 0 {
		return in.MaxHeldBytes
	}
	return DefaultMaxHeldBytes
}

func heldAt(m *cold.Mark, seq uint64) int {
	i, ok := slices.BinarySearchFunc(m.Held, seq, bySeq)
	if !ok {
		return -1
	}
	return i
}

func bySeq(h cold.Held, seq uint64) int { return cmp.Compare(h.Seq, seq) }
