package hop

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tally-dev/tally/store/delivery"
)

// lossyPub stores every publish at once, except those lose picks: they are dropped
// silently, their futures never settle, as a publish lost in a server restart. It checks
// what a receiver would hold: on every store, how far above the lowest number of its
// subject not stored yet the stored one is.
type lossyPub struct {
	lose func(subject string, n uint64, attempt int) bool

	mu       sync.Mutex
	attempts map[string]int            // publishes by message id
	stored   map[string]map[uint64]int // numbers stored, with their sizes, by subject
	through  map[string]uint64         // every number below it is stored, by subject
	above    map[string]int            // the most stored above a missing number, by subject
	bytes    map[string]int            // the most bytes stored above a missing number, by subject
	order    []string                  // message ids in storing order (first store of each)
}

func newLossyPub(lose func(string, uint64, int) bool) *lossyPub {
	return &lossyPub{lose: lose, attempts: map[string]int{}, stored: map[string]map[uint64]int{}, through: map[string]uint64{}, above: map[string]int{}, bytes: map[string]int{}}
}

// numbered makes n entries to subject, numbered from..from+n-1 (message id subject.number).
func numbered(seq *uint64, subject string, from, n int) []delivery.OutboxEntry {
	out := make([]delivery.OutboxEntry, n)
	for i := range out {
		*seq++
		out[i] = delivery.OutboxEntry{Seq: *seq, Subject: subject, MsgID: fmt.Sprintf("%s.%d", subject, from+i)}
	}
	return out
}

func (p *lossyPub) PublishMsgAsync(msg *nats.Msg, _ ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	id := msg.Header.Get(jetstream.MsgIDHeader)
	var n uint64
	if _, err := fmt.Sscanf(id[len(msg.Subject)+1:], "%d", &n); err != nil {
		return nil, err
	}
	fut := newFuture(msg)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.attempts[id]++
	if p.lose(msg.Subject, n, p.attempts[id]) {
		return fut, nil
	}
	st := p.stored[msg.Subject]
	if st == nil {
		st = map[uint64]int{}
		p.stored[msg.Subject] = st
	}
	if _, ok := st[n]; !ok {
		st[n] = len(msg.Data)
		p.order = append(p.order, id)
		for {
			if _, ok := st[p.through[msg.Subject]]; !ok {
				break
			}
			p.through[msg.Subject]++
		}
		// Stored above the lowest missing number: what a receiver holds above its gap.
		if a := int(n) - int(p.through[msg.Subject]); a > p.above[msg.Subject] {
			p.above[msg.Subject] = a
		}
		if n > p.through[msg.Subject] {
			b := 0
			for k, size := range st {
				if k > p.through[msg.Subject] {
					b += size
				}
			}
			p.bytes[msg.Subject] = max(p.bytes[msg.Subject], b)
		}
	}
	fut.ok <- &jetstream.PubAck{}
	return fut, nil
}

func (p *lossyPub) snapshot() (order []string, above map[string]int, through map[string]uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.order), maps(p.above), maps(p.through)
}

func (p *lossyPub) mostBytes(subject string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.bytes[subject]
}

func maps[V any](m map[string]V) map[string]V {
	c := make(map[string]V, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// One publish lost silently among 10 000 entries to one destination: the sender goes
// on until Window-1 entries are out above it, waits until AckTimeout tells it the
// publish was lost, sends it again, and goes on. A receiver never holds more than
// Window-1 batches above the gap, and everything is stored in the end.
func TestOutboxWindowBoundsALostPublish(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const lost = 100
		p := newLossyPub(func(_ string, n uint64, attempt int) bool { return n == lost && attempt == 1 })
		o := NewOutbox(p, OutboxOptions{})
		start := time.Now()
		var seq uint64
		for from := 0; from < 10_000; from += 100 { // a transaction's entries per Send
			if err := o.Send(t.Context(), numbered(&seq, "d", from, 100)); err != nil {
				t.Fatal(err)
			}
		}
		if err := o.Reap(t.Context(), true); err != nil {
			t.Fatal(err)
		}
		order, above, through := p.snapshot()
		if above["d"] > Window-1 {
			t.Fatalf("%d entries stored above the lost one, at most Window-1 = %d", above["d"], Window-1)
		}
		if through["d"] != 10_000 || len(order) != 10_000 {
			t.Fatalf("stored %d entries, through %d, want all 10 000", len(order), through["d"])
		}
		if i := slices.Index(order, fmt.Sprint("d.", lost)); i != lost+Window-1 {
			t.Fatalf("the lost entry stored %dth, want after the %d entries the window let out before it", i, lost+Window-1)
		}
		if d := time.Since(start); d < 10*time.Second || d > 11*time.Second {
			t.Fatalf("took %v, want one AckTimeout (10s) and a backoff", d)
		}
		published := o.Published()
		slices.Sort(published)
		if len(published) != 10_000 || len(slices.Compact(published)) != 10_000 {
			t.Fatalf("%d reported published, want 10 000 once each", len(published))
		}
	})
}

// A publish lost before a crash and again after it: the entries stored above it before
// the crash were deleted from the caller's outbox, and the next Outbox, which cannot
// count them, sends nothing after the gap they left in Seq until the entry below the gap
// is stored. (Counting only what it sent, it let another Window-1 out above the lost
// entry: twice the bound.)
func TestOutboxWindowAcrossRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const lost = 5
		p := newLossyPub(func(_ string, n uint64, attempt int) bool { return n == lost && attempt <= 2 })
		var seq uint64
		all := numbered(&seq, "d", 0, 3000)
		ctx, crash := context.WithCancel(t.Context())
		o := NewOutbox(p, OutboxOptions{})
		sent := make(chan error)
		go func() { sent <- o.Send(ctx, all) }()
		synctest.Wait() // Send waits for the lost entry, its window full
		crash()
		if err := <-sent; !errors.Is(err, context.Canceled) {
			t.Fatalf("Send: %v, want to wait until the crash", err)
		}
		// The caller deleted what was reported stored; the rest it sends at its next start.
		stored := map[uint64]bool{}
		for _, s := range o.Published() {
			stored[s] = true
		}
		var left []delivery.OutboxEntry
		for _, e := range all {
			if !stored[e.Seq] {
				left = append(left, e)
			}
		}
		o = NewOutbox(p, OutboxOptions{})
		if err := o.Send(t.Context(), left); err != nil {
			t.Fatal(err)
		}
		if err := o.Reap(t.Context(), true); err != nil {
			t.Fatal(err)
		}
		_, above, through := p.snapshot()
		if through["d"] != 3000 || above["d"] > Window-1 {
			t.Fatalf("stored through %d, %d entries above the lost one at most; want all, at most %d", through["d"], above["d"], Window-1)
		}
	})
}

// Large entries fill the window by their bytes: no more than WindowBytes are out from a
// lost publish on, itself included, and an entry larger than WindowBytes goes alone.
func TestOutboxWindowBytes(t *testing.T) {
	f := func(t *testing.T, size, lost int, wantAbove int) {
		t.Helper()
		synctest.Test(t, func(t *testing.T) {
			p := newLossyPub(func(_ string, n uint64, attempt int) bool { return n == uint64(lost) && attempt == 1 })
			o := NewOutbox(p, OutboxOptions{})
			var seq uint64
			es := numbered(&seq, "d", 0, 100)
			for i := range es {
				es[i].Data = make([]byte, size)
			}
			if err := o.Send(t.Context(), es); err != nil {
				t.Fatal(err)
			}
			if err := o.Reap(t.Context(), true); err != nil {
				t.Fatal(err)
			}
			_, above, through := p.snapshot()
			if through["d"] != 100 || above["d"] != wantAbove || p.mostBytes("d") > max(WindowBytes-size, 0) {
				t.Fatalf("entries of %d bytes: stored through %d, %d entries and %d bytes above the lost one; want all, %d entries, at most %d bytes",
					size, through["d"], above["d"], p.mostBytes("d"), wantAbove, WindowBytes-size)
			}
		})
	}
	f(t, 100<<10, 10, WindowBytes/(100<<10)-1) // 20 of 100 KiB fill the window: 19 above the lost one
	f(t, 1<<20, 10, 1)
	f(t, 3<<20, 10, 0) // alone
	f(t, 3<<20, 0, 0)
}

// The window is per destination: while one destination waits for a lost publish, the
// entries to others flow — until Send reaches the next entry to the blocked one, which
// it waits for in order (head-of-line), as it waits when MaxInflight are out.
func TestOutboxWindowPerDestination(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newLossyPub(func(subject string, n uint64, attempt int) bool { return subject == "a" && n == 0 && attempt == 1 })
		o := NewOutbox(p, OutboxOptions{})
		var seq uint64
		var es []delivery.OutboxEntry
		es = append(es, numbered(&seq, "a", 0, Window)...) // a.0 is lost: the window to a is full
		es = append(es, numbered(&seq, "b", 0, 100)...)    // b flows
		es = append(es, numbered(&seq, "a", Window, 1)...) // waits for a.0
		es = append(es, numbered(&seq, "b", 100, 100)...)  // waits behind it
		sent := make(chan error, 1)
		go func() { sent <- o.Send(t.Context(), es) }()
		synctest.Wait() // Send waits for a.0's acknowledgement, in vain until AckTimeout
		order, above, through := p.snapshot()
		if len(order) != Window-1+100 || through["b"] != 100 || above["a"] != Window-1 {
			t.Fatalf("while a.0 is lost: %d stored, b through %d, %d above a's gap; want a.1…a.%d and b.0…b.99", len(order), through["b"], above["a"], Window-1)
		}
		if err := <-sent; err != nil {
			t.Fatal(err)
		}
		if err := o.Reap(t.Context(), true); err != nil {
			t.Fatal(err)
		}
		order, _, through = p.snapshot()
		if through["a"] != Window+1 || through["b"] != 200 {
			t.Fatalf("stored a through %d, b through %d; want everything", through["a"], through["b"])
		}
		if i, j := slices.Index(order, "a.0"), slices.Index(order, fmt.Sprint("a.", Window)); j < i {
			t.Fatalf("a.%d stored before a.0 was sent again", Window)
		}
	})
}

// Whatever is lost, however often, and however entries to several destinations are
// interleaved and cut into Sends: no destination ever has an entry stored Window or more
// places above one that is not, and every entry is stored.
func TestOutboxWindowRandom(t *testing.T) {
	for round := range 8 {
		synctest.Test(t, func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(round), 22))
			rate := []float64{0.0005, 0.01, 0.2}[round%3]
			p := newLossyPub(func(string, uint64, int) bool { return r.Float64() < rate })
			o := NewOutbox(p, OutboxOptions{MaxInflight: []int{64, 1024, 4096}[r.IntN(3)], AckTimeout: time.Second})
			dests := []string{"x", "y", "z"}
			next := map[string]int{}
			var seq uint64
			for range 300 {
				var es []delivery.OutboxEntry
				for range 1 + r.IntN(3) {
					d := dests[r.IntN(len(dests))]
					k := 1 + r.IntN(20)
					es = append(es, numbered(&seq, d, next[d], k)...)
					next[d] += k
				}
				if err := o.Send(t.Context(), es); err != nil {
					t.Fatal(err)
				}
				o.Reap(t.Context(), false)
			}
			if err := o.Reap(t.Context(), true); err != nil {
				t.Fatal(err)
			}
			_, above, through := p.snapshot()
			t.Logf("round %d, loss %g: most above a gap %v", round, rate, above)
			for _, d := range dests {
				if above[d] > Window-1 || through[d] != uint64(next[d]) {
					t.Fatalf("round %d, loss %g: %s stored through %d of %d, %d above a gap (at most %d)", round, rate, d, through[d], next[d], above[d], Window-1)
				}
			}
			if o.Len() != 0 {
				t.Fatalf("%d entries left", o.Len())
			}
		})
	}
}
