package hop

import (
	"cmp"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"

	"github.com/tally-dev/tally/store/delivery"
)

// DefaultMaxHeld is the most batches held above a gap per source: a sender keeps within
// Window of its oldest unstored entry, so more is never a gap that can fill.
const DefaultMaxHeld = Window

// HeldStore keeps the payloads of the batches an In holds above a gap, each under its own
// key, so that neither RAM nor the marks (rewritten with the destination's state at every
// commit) carry them. In writes a payload once, when it holds the batch, reads it once
// and deletes it when it hands the batch out (Next).
//
// In assumes nothing of a write's durability: a store may keep its writes in the
// caller's transaction and lose them with it, as long as the marks are persisted (or
// lost) with them. A store whose writes are durable at once (its own transactions) must
// delete a payload only with, or after, the commit of the marks that no longer hold it,
// and may find a payload written again that it has already (a batch held again after a
// crash, a re-sent message): a Put of the same (src, seq) twice must be harmless.
type HeldStore interface {
	Put(src uint32, seq uint64, data []byte) error
	Get(src uint32, seq uint64) ([]byte, error)
	Delete(src uint32, seq uint64) error
}

// Verdict is what Offer did with a batch.
type Verdict uint8

const (
	// Dup: the batch was applied (or is held) already; there is nothing to do.
	Dup Verdict = iota
	// Apply: the batch is next; the marks count it as applied, the caller applies it now.
	Apply
	// Hold: the batch is above a gap; it is stored and Next hands it out once in order.
	Hold
)

// InStats counts what a receiver did; safe to read from any goroutine and shareable by
// the receivers of many destinations.
type InStats struct {
	Dups        atomic.Int64 // batches skipped as applied (or held) already
	Held        atomic.Int64 // batches held above a gap now
	HeldBytes   atomic.Int64 // their payloads' bytes
	GapsSkipped atomic.Int64 // gaps given up because too much was held above them
}

// In is the receiving end of every channel into one destination. It applies each
// source's batches strictly in its gap-free order, exactly once: a batch above a gap is
// held until the gap fills, a batch at or below the mark is a duplicate however late it
// comes. Only the destination's goroutine may call it.
//
// Releasing is incremental: Offer applies only the batch it is given (when that is
// next), and Next hands out the held batches that are now in order, one a call, each
// counted as applied only once handed out. The caller takes as many as fit in its
// transaction; what it does not take stays held, in the marks it persists.
type In struct {
	// Marks is what has been applied and held, by source: sequences only, the payloads
	// are in Store. The caller persists it with the state the applied batches changed, in
	// one transaction, so a crash neither loses a held batch nor applies one twice.
	// Marks of older versions whose held batches carry their payload are moved into
	// Store by the first call.
	Marks map[uint32]*delivery.Mark
	// Store keeps the held payloads; it must be set.
	Store HeldStore
	// MaxHeld is the most batches held per source above a gap (DefaultMaxHeld when 0).
	MaxHeld int
	Stats   *InStats // nil: not counted
	// Holding, when set, is the batches this In holds now, as Stats.Held is those of
	// every In sharing Stats: a destination holding some has not applied everything it
	// was sent, however far its stream position has gone.
	Holding *atomic.Int64
	Log     *slog.Logger

	ready   []uint32 // sources whose oldest held batch may be next
	loaded  bool     // Marks were counted (and moved to Store)
	counted bool     // held and bytes are in Stats
	held    int      // batches held over all sources
	bytes   int      // their payload bytes
}

// Offer takes batch seq of src with its payload data (copied when held). A batch with
// no data fills its number with nothing — a batch that was dead-lettered — so the ones
// after it need not wait for it: Apply then means there is nothing to apply, and Next
// hands it out with no data. A source holding more than MaxHeld batches above a gap
// below them all gives the gap up: logged at error with the missing range, counted in
// GapsSkipped, and the held batches are handed out by Next.
//
// On an error (the store's) the caller must stop without persisting the marks.
func (in *In) Offer(src uint32, seq uint64, data []byte) (Verdict, error) {
	if err := in.load(); err != nil {
		return Dup, err
	}
	m := in.Marks[src]
	if m == nil {
		m = &delivery.Mark{}
		in.Marks[src] = m
	}
	i, found := slices.BinarySearchFunc(m.Held, seq, bySeq)
	if seq <= m.Through || found || slices.Contains(m.Above, seq) {
		if in.Stats != nil {
			in.Stats.Dups.Add(1)
		}
		return Dup, nil
	}
	if seq == m.Through+1 {
		m.Through = seq
		if passAbove(m) {
			in.ready = append(in.ready, src)
		}
		return Apply, nil
	}
	h := delivery.Held{Seq: seq, Size: uint32(len(data))}
	if len(data) > 0 {
		if err := in.Store.Put(src, seq, data); err != nil {
			return Dup, fmt.Errorf("cannot hold batch %d of source %d: %w", seq, src, err)
		}
	}
	m.Held = slices.Insert(m.Held, i, h)
	in.hold(1, len(data))
	for len(m.Held) > in.maxHeld() && m.Held[0].Seq > m.Through+1 {
		in.skipGap(src, m)
	}
	return Hold, nil
}

// Skip fills number seq of src with nothing: Offer with no data.
func (in *In) Skip(src uint32, seq uint64) (Verdict, error) { return in.Offer(src, seq, nil) }

// Next hands out a held batch that is now next in its source's order, and counts it as
// applied: ok is false when there is none. data is nil for a number filled by Skip. On
// an error the marks are as they were, and the caller must stop without persisting them.
func (in *In) Next() (src uint32, seq uint64, data []byte, ok bool, err error) {
	if err := in.load(); err != nil {
		return 0, 0, nil, false, err
	}
	for len(in.ready) > 0 {
		src = in.ready[len(in.ready)-1]
		if seq, data, ok, err = in.NextFrom(src); err != nil || ok {
			return src, seq, data, ok, err
		}
		in.ready = in.ready[:len(in.ready)-1]
	}
	return 0, 0, nil, false, nil
}

// NextFrom is Next for source src only: a replay releases each source as far as the
// state it replays says, whatever order Next would take.
func (in *In) NextFrom(src uint32) (seq uint64, data []byte, ok bool, err error) {
	if err := in.load(); err != nil {
		return 0, nil, false, err
	}
	m := in.Marks[src]
	if m == nil || len(m.Held) == 0 || m.Held[0].Seq != m.Through+1 {
		return 0, nil, false, nil
	}
	h := m.Held[0]
	if data, err = in.take(src, h); err != nil {
		return 0, nil, false, err
	}
	m.Held = slices.Delete(m.Held, 0, 1)
	if len(m.Held) == 0 {
		m.Held = nil
	}
	m.Through = h.Seq
	passAbove(m)
	in.hold(-1, -int(h.Size))
	return h.Seq, data, true, nil
}

// Releasable reports whether marks hold a batch that is next in its source's order —
// what Next of an In over them would hand out — without changing them: a caller that
// makes a new In for each transaction asks whether another is due.
func Releasable(marks map[uint32]*delivery.Mark) bool {
	for _, m := range marks {
		through := m.Through
		for slices.Contains(m.Above, through+1) {
			through++
		}
		if len(m.Held) > 0 && m.Held[0].Seq == through+1 {
			return true
		}
	}
	return false
}

// Held returns the batches and payload bytes held now over all sources.
func (in *In) Held() (batches, bytes int) {
	in.count()
	return in.held, in.bytes
}

// Close takes the batches this In holds out of Stats: the destination stops (its marks
// stay persisted and are counted again by whoever loads them).
func (in *In) Close() {
	if in.counted && in.Stats != nil {
		in.Stats.Held.Add(-int64(in.held))
		in.Stats.HeldBytes.Add(-int64(in.bytes))
	}
	if in.counted && in.Holding != nil {
		in.Holding.Add(-int64(in.held))
	}
	in.counted, in.loaded, in.held, in.bytes, in.ready = false, false, 0, 0, nil
}

// load counts the batches held in Marks as loaded, moves payloads that older versions
// kept in the marks into Store, and finds the sources whose held batches are next (a
// release that was cut between two commits, a gap given up).
func (in *In) load() error {
	if in.loaded {
		return nil
	}
	if in.Marks == nil {
		in.Marks = map[uint32]*delivery.Mark{}
	}
	for src, m := range in.Marks {
		for i := range m.Held {
			h := &m.Held[i]
			if h.Data != nil {
				h.Size = uint32(len(h.Data))
				if err := in.Store.Put(src, h.Seq, h.Data); err != nil {
					return fmt.Errorf("cannot move held batch %d of source %d to its store: %w", h.Seq, src, err)
				}
				h.Data = nil
			}
		}
		if passAbove(m) {
			in.ready = append(in.ready, src)
		}
	}
	in.count()
	in.loaded = true
	return nil
}

// count accounts, once, for the batches held in Marks.
func (in *In) count() {
	if in.counted {
		return
	}
	in.counted = true
	in.held, in.bytes = 0, 0
	n, b := 0, 0
	for _, m := range in.Marks {
		for _, h := range m.Held {
			n++
			b += max(int(h.Size), len(h.Data))
		}
	}
	in.hold(n, b)
}

func (in *In) hold(batches, bytes int) {
	in.held += batches
	in.bytes += bytes
	if in.Stats != nil && in.counted {
		in.Stats.Held.Add(int64(batches))
		in.Stats.HeldBytes.Add(int64(bytes))
	}
	if in.Holding != nil && in.counted {
		in.Holding.Add(int64(batches))
	}
}

// take reads and deletes the payload of held batch h of src.
func (in *In) take(src uint32, h delivery.Held) ([]byte, error) {
	if h.Size == 0 {
		return nil, nil // a number filled with nothing
	}
	data, err := in.Store.Get(src, h.Seq)
	if err == nil {
		err = in.Store.Delete(src, h.Seq)
	}
	if err != nil {
		return nil, fmt.Errorf("cannot release held batch %d of source %d: %w", h.Seq, src, err)
	}
	return data, nil
}

// passAbove moves Through over the legacy Above entries that are next (batches older
// versions applied above a gap), and reports whether m's oldest held batch is next.
func passAbove(m *delivery.Mark) bool {
	for len(m.Above) > 0 {
		i := slices.Index(m.Above, m.Through+1)
		if i < 0 {
			break
		}
		m.Above = slices.Delete(m.Above, i, i+1)
		m.Through++
	}
	if len(m.Above) == 0 {
		m.Above = nil
	}
	return len(m.Held) > 0 && m.Held[0].Seq == m.Through+1
}

// skipGap gives up the gap below the oldest held batch of m: whatever was missing there
// is taken as lost (its sender cannot have it in flight: see Window), so the batches
// above it can be applied rather than held for ever.
func (in *In) skipGap(src uint32, m *delivery.Mark) {
	first := m.Held[0].Seq
	for _, a := range m.Above {
		first = min(first, a)
	}
	if in.Log != nil {
		in.Log.Error("gave up a gap in a hop: batches missing, the ones above it are applied",
			"source", src, "missing_from", m.Through+1, "missing_to", first-1, "held", len(m.Held))
	}
	if in.Stats != nil {
		in.Stats.GapsSkipped.Add(1)
	}
	m.Through = first - 1
	if passAbove(m) {
		in.ready = append(in.ready, src)
	}
}

func (in *In) maxHeld() int {
	if in.MaxHeld > 0 {
		return in.MaxHeld
	}
	return DefaultMaxHeld
}

func bySeq(h delivery.Held, seq uint64) int { return cmp.Compare(h.Seq, seq) }
