package hop

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tally-dev/tally/store/delivery"
	"github.com/vmihailenco/msgpack/v5"
)

// A random model test in the style of goka's tester: several sources send gap-free
// sequences; the channel duplicates, reorders and delays them (some gaps fill late);
// the destination takes a few released batches at a time, commits now and then and
// crashes at random, falling back to its last commit (marks persisted with what they
// applied, the store's committed payloads) and receiving again everything after it.
// Applied per source must be exactly the sent sequence, in order, once.
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
		store := newFakeStore(seed%2 == 0)
		in := &In{Stats: st, Store: store}
		applied := map[uint32][]uint64{}
		apply := func(src uint32, seq uint64) { applied[src] = append(applied[src], seq) }
		take := func(n int) {
			for ; n != 0; n-- {
				src, seq, data, ok, err := in.Next()
				if err != nil {
					t.Fatalf("seed %d: %v", seed, err)
				}
				if !ok {
					return
				}
				if s, q := seqOf(t, data); s != src || q != seq {
					t.Fatalf("seed %d: Next returned %d/%d with the payload of %d/%d", seed, src, seq, s, q)
				}
				apply(src, seq)
			}
		}
		// The last commit: encoded marks, how much each source had applied, and where in
		// the arrivals the stream position was.
		var cpMarks []byte
		cpApplied := map[uint32]int{}
		cpAt := 0
		commit := func(at int) {
			b, err := msgpack.Marshal(in.Marks)
			if err != nil {
				t.Fatal(err)
			}
			store.commit()
			cpMarks, cpAt = b, at
			for s, a := range applied {
				cpApplied[s] = len(a)
			}
		}
		crashes := 0
		for i := 0; i < len(arrivals); i++ {
			a := arrivals[i]
			v, err := in.Offer(a.src, a.seq, payload(a.src, a.seq))
			if err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
			if v == Apply {
				apply(a.src, a.seq)
			}
			take(r.IntN(3))
			switch r.IntN(40) {
			case 0:
				commit(i + 1)
			case 1:
				if crashes > 5 {
					break
				}
				crashes++
				store.discard()
				in.Close()
				marks := map[uint32]*delivery.Mark{}
				if cpMarks != nil {
					if err := msgpack.Unmarshal(cpMarks, &marks); err != nil {
						t.Fatal(err)
					}
				}
				in = &In{Marks: marks, Stats: st, Store: store}
				for s := range applied {
					applied[s] = applied[s][:cpApplied[s]]
				}
				i = cpAt - 1
			}
		}
		take(-1)
		for s := range uint32(sources) {
			want := make([]uint64, sent[s])
			for k := range want {
				want[k] = uint64(k + 1)
			}
			if !slices.Equal(applied[s], want) {
				t.Fatalf("seed %d: source %d applied %v, want 1..%d", seed, s, applied[s], sent[s])
			}
		}
		if n, b := in.Held(); n != 0 || b != 0 || st.Held.Load() != 0 || st.HeldBytes.Load() != 0 || st.GapsSkipped.Load() != 0 {
			t.Fatalf("seed %d: %d held (%d bytes, gauges %d %d), %d gaps skipped at the end", seed, n, b, st.Held.Load(), st.HeldBytes.Load(), st.GapsSkipped.Load())
		}
		commit(len(arrivals))
		// Only a payload put at once and held no more by the last commit can stay: a
		// batch held, then not held again after a crash (its gap filled first on replay).
		for k := range store.committed {
			if !store.putNow {
				t.Fatalf("seed %d: payload %v left in the store", seed, k)
			}
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
		in := &In{MaxHeld: maxHeld, Stats: st, Store: newFakeStore(false)}
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
			got, _ := feed(t, in, 0, s, payload(0, s))
			applied = append(applied, got...)
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
		for _, s := range heldSeqs(in.Marks[0]) {
			got[s] = true
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
