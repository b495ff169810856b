package hop

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tally-dev/tally/store/cold"
)

// payload is what source src sends as batch seq.
func payload(src uint32, seq uint64) []byte { return fmt.Appendf(nil, "%d/%d", src, seq) }

// seqOf parses a payload back.
func seqOf(t *testing.T, p []byte) (uint32, uint64) {
	t.Helper()
	var src uint32
	var seq uint64
	if _, err := fmt.Sscanf(string(p), "%d/%d", &src, &seq); err != nil {
		t.Fatalf("payload %q: %v", p, err)
	}
	return src, seq
}

// One source: what is applied, in order, for arrivals; held is what stays held.
func TestInOneSource(t *testing.T) {
	f := func(t *testing.T, maxHeld int, arrivals, want, held []uint64, skipped int64) {
		t.Helper()
		st := &InStats{}
		in := &In{MaxHeld: maxHeld, Stats: st}
		var got []uint64
		buf := make([]byte, 0, 32)
		for _, s := range arrivals {
			// One buffer for every message, as a consumer reuses it: held data is copied.
			buf = append(buf[:0], payload(1, s)...)
			ready, _ := in.Accept(1, s, buf)
			for _, p := range ready {
				_, seq := seqOf(t, p)
				got = append(got, seq)
			}
			clear(buf)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("arrivals %v: applied %v, want %v", arrivals, got, want)
		}
		var h []uint64
		for _, x := range in.Marks[1].Held {
			h = append(h, x.Seq)
		}
		if !slices.Equal(h, held) {
			t.Fatalf("arrivals %v: held %v, want %v", arrivals, h, held)
		}
		if n, _ := in.Held(); st.Held.Load() != int64(len(held)) || n != len(held) {
			t.Fatalf("arrivals %v: Stats.Held %d, Held() %d, want %d", arrivals, st.Held.Load(), n, len(held))
		}
		if st.GapsSkipped.Load() != skipped {
			t.Fatalf("arrivals %v: %d gaps skipped, want %d", arrivals, st.GapsSkipped.Load(), skipped)
		}
	}
	f(t, 10, []uint64{1, 2, 3}, []uint64{1, 2, 3}, nil, 0)
	f(t, 10, []uint64{1, 1, 2, 1, 2}, []uint64{1, 2}, nil, 0)
	// Finding 3: -1 (seq 2) before +1 (seq 1) is applied after it.
	f(t, 10, []uint64{2, 1}, []uint64{1, 2}, nil, 0)
	f(t, 10, []uint64{3, 2, 3, 2, 1}, []uint64{1, 2, 3}, nil, 0)
	f(t, 10, []uint64{1, 3, 5, 4}, []uint64{1}, []uint64{3, 4, 5}, 0)
	f(t, 10, []uint64{1, 3, 5, 4, 2}, []uint64{1, 2, 3, 4, 5}, nil, 0)
	// 2 never comes: the fourth batch held gives it up; a late 2 is a duplicate.
	f(t, 3, []uint64{1, 3, 4, 5, 6, 2, 7}, []uint64{1, 3, 4, 5, 6, 7}, nil, 1)
	// Two gaps: giving up the first releases only up to the second.
	f(t, 3, []uint64{4, 2, 5, 6, 1, 9}, []uint64{2, 4, 5, 6}, []uint64{9}, 2)
	f(t, 1, []uint64{3, 5}, []uint64{3}, []uint64{5}, 1)
}

// Checkpoints of older versions listed batches applied above a gap in Above: they stay
// applied, and Through passes over them.
func TestInLegacyAbove(t *testing.T) {
	in := &In{Marks: map[uint32]*cold.Mark{7: {Through: 2, Above: []uint64{4, 6}}}}
	step := func(seq uint64, want []uint64, wantDup bool) {
		t.Helper()
		ready, dup := in.Accept(7, seq, payload(7, seq))
		var got []uint64
		for _, p := range ready {
			_, s := seqOf(t, p)
			got = append(got, s)
		}
		if dup != wantDup || !slices.Equal(got, want) {
			t.Fatalf("seq %d: ready %v dup %v, want %v %v", seq, got, dup, want, wantDup)
		}
	}
	step(4, nil, true)
	step(2, nil, true)
	step(7, nil, false) // held above 5
	step(3, []uint64{3}, false)
	step(5, []uint64{5, 7}, false)
	if m := in.Marks[7]; m.Through != 7 || m.Above != nil || m.Held != nil {
		t.Fatalf("mark %+v, want through 7", m)
	}
	// A gap given up below an Above entry stops at it.
	in = &In{MaxHeld: 1, Marks: map[uint32]*cold.Mark{7: {Through: 1, Above: []uint64{3}}}}
	step(5, nil, false)
	step(6, []uint64{5, 6}, false)
	if m := in.Marks[7]; m.Through != 6 || m.Above != nil || m.Held != nil {
		t.Fatalf("mark %+v, want through 6", m)
	}
}

// The payloads held over all sources are bounded: past MaxHeldBytes, the source adding
// to them gives up its oldest gap.
func TestInMaxHeldBytes(t *testing.T) {
	st := &InStats{}
	in := &In{MaxHeldBytes: 10, Stats: st}
	if r, _ := in.Accept(1, 2, make([]byte, 6)); r != nil {
		t.Fatalf("released %d", len(r))
	}
	if r, _ := in.Accept(2, 2, make([]byte, 4)); r != nil {
		t.Fatalf("released %d", len(r))
	}
	if _, b := in.Held(); b != 10 {
		t.Fatalf("held %d bytes, want 10", b)
	}
	r, _ := in.Accept(2, 3, make([]byte, 1))
	if len(r) != 2 || st.GapsSkipped.Load() != 1 {
		t.Fatalf("released %d, skipped %d; want 2, 1", len(r), st.GapsSkipped.Load())
	}
	if n, b := in.Held(); n != 1 || b != 6 || st.Held.Load() != 1 {
		t.Fatalf("held %d (%d bytes, gauge %d), want 1 of 6 bytes", n, b, st.Held.Load())
	}
	in.Close()
	if st.Held.Load() != 0 {
		t.Fatalf("gauge %d after Close", st.Held.Load())
	}
}

// A random model test in the style of goka's tester: several sources send gap-free
// sequences; the channel duplicates, reorders and delays them (some gaps fill late),
// and the destination crashes at random, falling back to its last checkpoint (marks
// persisted with what they applied) and receiving again everything after it. Applied
// per source must be exactly the sent sequence, in order, once.
func TestInRandomExactlyOnce(t *testing.T) {
	for seed := range uint64(300) {
		r := rand.New(rand.NewPCG(seed, 13))
		sources := 1 + r.IntN(4)
		type arrival struct {
			src uint32
			seq uint64
		}
		var arrivals []arrival
		sent := make([]uint64, sources)
		for range 50 + r.IntN(400) {
			src := uint32(r.IntN(sources))
			sent[src]++
			for range 1 + r.IntN(3) { // re-sent up to twice
				arrivals = append(arrivals, arrival{src, sent[src]})
			}
		}
		// Reordering, mostly local, sometimes far (a publish retried much later).
		for i := range arrivals {
			d := r.IntN(6)
			if r.IntN(20) == 0 {
				d = r.IntN(100)
			}
			j := min(len(arrivals)-1, i+d)
			arrivals[i], arrivals[j] = arrivals[j], arrivals[i]
		}
		st := &InStats{}
		in := &In{Stats: st}
		applied := map[uint32][]uint64{}
		// The last checkpoint: encoded marks, how much each source had applied, and
		// where in the arrivals the stream position was.
		var cpMarks []byte
		cpApplied := map[uint32]int{}
		cpAt := 0
		checkpoint := func(at int) {
			b, err := msgpack.Marshal(in.Marks)
			if err != nil {
				t.Fatal(err)
			}
			cpMarks, cpAt = b, at
			for s, a := range applied {
				cpApplied[s] = len(a)
			}
		}
		crashes := 0
		for i := 0; i < len(arrivals); i++ {
			a := arrivals[i]
			ready, _ := in.Accept(a.src, a.seq, payload(a.src, a.seq))
			for _, p := range ready {
				src, seq := seqOf(t, p)
				if src != a.src {
					t.Fatalf("seed %d: source %d released a batch of %d", seed, a.src, src)
				}
				applied[src] = append(applied[src], seq)
			}
			switch r.IntN(40) {
			case 0:
				checkpoint(i + 1)
			case 1:
				if crashes > 5 {
					break
				}
				crashes++
				in.Close()
				marks := map[uint32]*cold.Mark{}
				if cpMarks != nil {
					if err := msgpack.Unmarshal(cpMarks, &marks); err != nil {
						t.Fatal(err)
					}
				}
				in = &In{Marks: marks, Stats: st}
				for s := range applied {
					applied[s] = applied[s][:cpApplied[s]]
				}
				i = cpAt - 1
			}
		}
		for s := range uint32(sources) {
			want := make([]uint64, sent[s])
			for k := range want {
				want[k] = uint64(k + 1)
			}
			if !slices.Equal(applied[s], want) {
				t.Fatalf("seed %d: source %d applied %v, want 1..%d", seed, s, applied[s], sent[s])
			}
		}
		if n, b := in.Held(); n != 0 || b != 0 || st.Held.Load() != 0 || st.GapsSkipped.Load() != 0 {
			t.Fatalf("seed %d: %d held (%d bytes, gauge %d), %d gaps skipped at the end", seed, n, b, st.Held.Load(), st.GapsSkipped.Load())
		}
	}
}

// Gaps that never fill: some batches are lost for good and MaxHeld is small. Applied is
// still in order and once; every batch that arrived is applied or still held, unless it
// came after its gap was given up (a small MaxHeld takes a late batch for a lost one).
func TestInRandomLostBatches(t *testing.T) {
	for seed := range uint64(300) {
		r := rand.New(rand.NewPCG(seed, 29))
		maxHeld := 1 + r.IntN(8)
		st := &InStats{}
		in := &In{MaxHeld: maxHeld, Stats: st}
		n := uint64(20 + r.IntN(300))
		lost := map[uint64]bool{}
		var arrivals []uint64
		for s := uint64(1); s <= n; s++ {
			if r.IntN(15) == 0 {
				lost[s] = true
				continue
			}
			for range 1 + r.IntN(2) {
				arrivals = append(arrivals, s)
			}
		}
		for i := range arrivals {
			j := min(len(arrivals)-1, i+r.IntN(4))
			arrivals[i], arrivals[j] = arrivals[j], arrivals[i]
		}
		var applied []uint64
		tooLate := map[uint64]bool{} // arrived first after its gap was given up
		for _, s := range arrivals {
			if m := in.Marks[0]; m != nil && s <= m.Through && !slices.Contains(applied, s) {
				tooLate[s] = true
			}
			ready, _ := in.Accept(0, s, []byte(strconv.FormatUint(s, 10)))
			for _, p := range ready {
				v, _ := strconv.ParseUint(string(p), 10, 64)
				applied = append(applied, v)
			}
			if held := len(in.Marks[0].Held); held > maxHeld {
				t.Fatalf("seed %d: %d held, at most %d", seed, held, maxHeld)
			}
		}
		if !slices.IsSorted(applied) || len(slices.Compact(slices.Clone(applied))) != len(applied) {
			t.Fatalf("seed %d: applied out of order or twice: %v", seed, applied)
		}
		got := map[uint64]bool{}
		for _, s := range applied {
			got[s] = true
		}
		for _, h := range in.Marks[0].Held {
			got[h.Seq] = true
		}
		last := uint64(0)
		if len(applied) > 0 {
			last = applied[len(applied)-1]
		}
		for s := uint64(1); s <= n; s++ {
			switch {
			case !lost[s] && !got[s] && !slices.Contains(arrivals, s):
				// never sent
			case !lost[s] && !got[s] && !tooLate[s]:
				t.Fatalf("seed %d: batch %d arrived but was neither applied nor held", seed, s)
			case lost[s] && got[s]:
				t.Fatalf("seed %d: lost batch %d applied", seed, s)
			case lost[s] && s < last && st.GapsSkipped.Load() == 0:
				t.Fatalf("seed %d: applied past lost batch %d without giving up a gap", seed, s)
			}
		}
	}
}
