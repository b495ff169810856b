package hop

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/tally-dev/tally/store/delivery"
	"github.com/vmihailenco/msgpack/v5"
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

type heldKey struct {
	src uint32
	seq uint64
}

var errMissing = errors.New("no such held batch")

// fakeStore is a HeldStore over a map with a transaction's semantics: writes are
// pending until commit and lost by discard, as the event stage's store is. With
// putNow, Puts are committed at once and only Deletes wait, as the counter's are.
type fakeStore struct {
	putNow    bool
	committed map[heldKey][]byte
	pending   map[heldKey][]byte // nil value: a delete
	puts      int
}

func newFakeStore(putNow bool) *fakeStore {
	return &fakeStore{putNow: putNow, committed: map[heldKey][]byte{}, pending: map[heldKey][]byte{}}
}

func (f *fakeStore) Put(src uint32, seq uint64, data []byte) error {
	f.puts++
	if f.putNow {
		f.committed[heldKey{src, seq}] = slices.Clone(data)
		return nil
	}
	f.pending[heldKey{src, seq}] = slices.Clone(data)
	return nil
}

func (f *fakeStore) Get(src uint32, seq uint64) ([]byte, error) {
	k := heldKey{src, seq}
	if v, ok := f.pending[k]; ok {
		if v == nil {
			return nil, fmt.Errorf("%w: %d/%d deleted", errMissing, src, seq)
		}
		return v, nil
	}
	if v, ok := f.committed[k]; ok {
		return v, nil
	}
	return nil, fmt.Errorf("%w: %d/%d", errMissing, src, seq)
}

func (f *fakeStore) Delete(src uint32, seq uint64) error {
	f.pending[heldKey{src, seq}] = nil
	return nil
}

func (f *fakeStore) commit() {
	for k, v := range f.pending {
		if v == nil {
			delete(f.committed, k)
		} else {
			f.committed[k] = v
		}
	}
	clear(f.pending)
}

func (f *fakeStore) discard() { clear(f.pending) }

// feed offers batch seq of src and takes every batch then in order: the sequences
// applied (decoded from their payloads), and the verdict.
func feed(t *testing.T, in *In, src uint32, seq uint64, data []byte) ([]uint64, Verdict) {
	t.Helper()
	v, err := in.Offer(src, seq, data)
	if err != nil {
		t.Fatal(err)
	}
	var got []uint64
	if v == Apply {
		got = append(got, seq)
	}
	return append(got, takeAll(t, in, -1)...), v
}

// takeAll takes up to n batches from Next (all when n < 0), checking each payload.
func takeAll(t *testing.T, in *In, n int) []uint64 {
	t.Helper()
	var got []uint64
	for ; n != 0; n-- {
		src, seq, data, ok, err := in.Next()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		if data != nil {
			if s, q := seqOf(t, data); s != src || q != seq {
				t.Fatalf("Next returned %d/%d with the payload of %d/%d", src, seq, s, q)
			}
		}
		got = append(got, seq)
	}
	return got
}

func heldSeqs(m *delivery.Mark) []uint64 {
	var h []uint64
	if m == nil {
		return nil
	}
	for _, x := range m.Held {
		if x.Data != nil {
			return []uint64{0} // a payload left in the marks
		}
		h = append(h, x.Seq)
	}
	return h
}

// One source: what is applied, in order, for arrivals; held is what stays held.
func TestInOneSource(t *testing.T) {
	f := func(t *testing.T, maxHeld int, arrivals, want, held []uint64, skipped int64) {
		t.Helper()
		st := &InStats{}
		store := newFakeStore(false)
		in := &In{MaxHeld: maxHeld, Stats: st, Store: store}
		var got []uint64
		buf := make([]byte, 0, 32)
		for _, s := range arrivals {
			// One buffer for every message, as a consumer reuses it: held data is copied.
			buf = append(buf[:0], payload(1, s)...)
			applied, _ := feed(t, in, 1, s, buf)
			got = append(got, applied...)
			clear(buf)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("arrivals %v: applied %v, want %v", arrivals, got, want)
		}
		if h := heldSeqs(in.Marks[1]); !slices.Equal(h, held) {
			t.Fatalf("arrivals %v: held %v, want %v", arrivals, h, held)
		}
		if n, _ := in.Held(); st.Held.Load() != int64(len(held)) || n != len(held) {
			t.Fatalf("arrivals %v: Stats.Held %d, Held() %d, want %d", arrivals, st.Held.Load(), n, len(held))
		}
		if st.GapsSkipped.Load() != skipped {
			t.Fatalf("arrivals %v: %d gaps skipped, want %d", arrivals, st.GapsSkipped.Load(), skipped)
		}
		store.commit()
		if len(store.committed) != len(held) {
			t.Fatalf("arrivals %v: %d payloads stored, want the %d held", arrivals, len(store.committed), len(held))
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

// A batch applied is a duplicate for ever, and so is a held one sent again: it is stored
// once.
func TestInDupForever(t *testing.T) {
	store := newFakeStore(false)
	st := &InStats{}
	in := &In{Store: store, Stats: st}
	for s := uint64(1); s <= 2000; s++ {
		if _, v := feed(t, in, 4, s, payload(4, s)); v != Apply {
			t.Fatalf("batch %d: verdict %d, want Apply", s, v)
		}
	}
	for _, s := range []uint64{1, 1000, 2000} {
		if _, v := feed(t, in, 4, s, payload(4, s)); v != Dup {
			t.Fatalf("batch %d again: verdict %d, want Dup", s, v)
		}
	}
	for range 3 {
		if _, v := feed(t, in, 4, 2002, payload(4, 2002)); v == Apply {
			t.Fatal("batch 2002 applied above a gap")
		}
	}
	if store.puts != 1 || st.Dups.Load() != 5 {
		t.Fatalf("%d puts, %d dups; want the held batch stored once, 5 dups", store.puts, st.Dups.Load())
	}
}

// Next hands out one batch a call and counts only those as applied: the caller commits
// between them, and a crash after a commit resumes the release where it was cut, from
// the persisted marks and the store's committed payloads.
func TestInIncrementalNext(t *testing.T) {
	for _, putNow := range []bool{false, true} {
		store := newFakeStore(putNow)
		st := &InStats{}
		in := &In{Store: store, Stats: st}
		for s := uint64(2); s <= 7; s++ {
			if _, v := feed(t, in, 1, s, payload(1, s)); v != Hold {
				t.Fatalf("batch %d: verdict %d, want Hold", s, v)
			}
		}
		store.commit()
		if n, b := in.Held(); n != 6 || b != 18 || st.HeldBytes.Load() != 18 {
			t.Fatalf("held %d batches of %d bytes (gauge %d), want 6 of 18", n, b, st.HeldBytes.Load())
		}
		if v, err := in.Offer(1, 1, payload(1, 1)); v != Apply || err != nil {
			t.Fatalf("the filler: %d %v, want Apply", v, err)
		}
		if m := in.Marks[1]; m.Through != 1 || len(m.Held) != 6 {
			t.Fatalf("the filler released held batches: %+v", m)
		}
		if got := takeAll(t, in, 2); !slices.Equal(got, []uint64{2, 3}) {
			t.Fatalf("took %v, want 2 3", got)
		}
		// A commit here, then 4 taken and a crash before the next commit.
		saved, err := msgpack.Marshal(in.Marks)
		if err != nil {
			t.Fatal(err)
		}
		store.commit()
		takeAll(t, in, 1)
		store.discard()
		in.Close()
		if st.Held.Load() != 0 || st.HeldBytes.Load() != 0 {
			t.Fatalf("gauges %d, %d after Close", st.Held.Load(), st.HeldBytes.Load())
		}
		marks := map[uint32]*delivery.Mark{}
		if err := msgpack.Unmarshal(saved, &marks); err != nil {
			t.Fatal(err)
		}
		in = &In{Store: store, Stats: st, Marks: marks}
		if n, _ := in.Held(); n != 4 {
			t.Fatalf("%d held after the reload, want 4", n)
		}
		if v, err := in.Offer(1, 3, payload(1, 3)); v != Dup || err != nil {
			t.Fatalf("3 again after the reload: %d %v, want Dup", v, err)
		}
		got := takeAll(t, in, -1)
		if !slices.Equal(got, []uint64{4, 5, 6, 7}) {
			t.Fatalf("after the reload took %v, want 4 5 6 7", got)
		}
		store.commit()
		if len(store.committed) != 0 || st.Held.Load() != 0 || st.HeldBytes.Load() != 0 {
			t.Fatalf("left %d payloads stored, gauges %d, %d", len(store.committed), st.Held.Load(), st.HeldBytes.Load())
		}
	}
}

// A sender has fewer than Window batches above a gap: that many held is no reason to give
// the gap up, one more is (a broken sender).
func TestInGivesUpOnlyPastTheBound(t *testing.T) {
	st := &InStats{}
	in := &In{Store: newFakeStore(false), Stats: st}
	for s := uint64(2); s <= Window+1; s++ {
		if _, v := feed(t, in, 9, s, payload(9, s)); v != Hold {
			t.Fatalf("batch %d: verdict %d, want Hold", s, v)
		}
	}
	if st.GapsSkipped.Load() != 0 {
		t.Fatalf("gave up a gap with %d held", Window)
	}
	got, _ := feed(t, in, 9, Window+2, payload(9, Window+2))
	if st.GapsSkipped.Load() != 1 || len(got) != Window+1 || got[0] != 2 || !slices.IsSorted(got) {
		t.Fatalf("past the bound: %d gaps skipped, released %d from %v; want 1 and 2..%d", st.GapsSkipped.Load(), len(got), got[:1], Window+2)
	}
	if _, v := feed(t, in, 9, 1, payload(9, 1)); v != Dup {
		t.Fatal("the batch of a given-up gap was applied late")
	}
}

// A number filled with nothing (a dead-lettered batch) lets the batches after it go.
func TestInSkip(t *testing.T) {
	store := newFakeStore(false)
	in := &In{Store: store}
	feed(t, in, 2, 1, payload(2, 1))
	feed(t, in, 2, 3, payload(2, 3))
	feed(t, in, 2, 4, payload(2, 4))
	if v, err := in.Skip(2, 6); v != Hold || err != nil {
		t.Fatalf("skip above a gap: %d %v", v, err)
	}
	if v, err := in.Skip(2, 2); v != Apply || err != nil {
		t.Fatalf("skip of the next one: %d %v", v, err)
	}
	if got := takeAll(t, in, -1); !slices.Equal(got, []uint64{3, 4}) {
		t.Fatalf("released %v, want 3 4", got)
	}
	if v, _ := in.Skip(2, 4); v != Dup {
		t.Fatal("a skip of an applied batch is not a duplicate")
	}
	got, _ := feed(t, in, 2, 5, payload(2, 5))
	if !slices.Equal(got, []uint64{5, 6}) || in.Marks[2].Through != 6 || store.puts != 2 {
		t.Fatalf("released %v (through %d, %d puts), want 5 6, 6 and 2", got, in.Marks[2].Through, store.puts)
	}
}

// Marks of older versions hold their payloads: the first call moves them into the store,
// and they are released from there.
func TestInMovesOldPayloads(t *testing.T) {
	type oldHeld struct {
		Seq  uint64 `msgpack:"s"`
		Data []byte `msgpack:"d"`
	}
	type oldMark struct {
		Through uint64    `msgpack:"t"`
		Above   []uint64  `msgpack:"a,omitempty"`
		Held    []oldHeld `msgpack:"h,omitempty"`
	}
	b, err := msgpack.Marshal(map[uint32]*oldMark{5: {Through: 1, Held: []oldHeld{{3, payload(5, 3)}, {4, payload(5, 4)}}}})
	if err != nil {
		t.Fatal(err)
	}
	marks := map[uint32]*delivery.Mark{}
	if err := msgpack.Unmarshal(b, &marks); err != nil {
		t.Fatal(err)
	}
	store := newFakeStore(false)
	st := &InStats{}
	in := &In{Store: store, Marks: marks, Stats: st}
	if _, v := feed(t, in, 5, 4, payload(5, 4)); v != Dup {
		t.Fatal("a held batch of the old marks was not known")
	}
	if h := heldSeqs(in.Marks[5]); !slices.Equal(h, []uint64{3, 4}) || store.puts != 2 {
		t.Fatalf("held %v after the first call (%d puts), want 3 4 moved out of the marks", h, store.puts)
	}
	if _, by := in.Held(); by != 6 || st.HeldBytes.Load() != 6 {
		t.Fatalf("%d bytes held (gauge %d), want 6", by, st.HeldBytes.Load())
	}
	if got, _ := feed(t, in, 5, 2, payload(5, 2)); !slices.Equal(got, []uint64{2, 3, 4}) {
		t.Fatalf("released %v, want 2 3 4", got)
	}
}

// Checkpoints of older versions listed batches applied above a gap in Above: they stay
// applied, and Through passes over them.
func TestInLegacyAbove(t *testing.T) {
	in := &In{Store: newFakeStore(false), Marks: map[uint32]*delivery.Mark{7: {Through: 2, Above: []uint64{4, 6}}}}
	step := func(seq uint64, want []uint64, wantDup bool) {
		t.Helper()
		got, v := feed(t, in, 7, seq, payload(7, seq))
		if (v == Dup) != wantDup || !slices.Equal(got, want) {
			t.Fatalf("seq %d: applied %v verdict %d, want %v dup %v", seq, got, v, want, wantDup)
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
	in = &In{Store: newFakeStore(false), MaxHeld: 1, Marks: map[uint32]*delivery.Mark{7: {Through: 1, Above: []uint64{3}}}}
	step(5, nil, false)
	step(6, []uint64{5, 6}, false)
	if m := in.Marks[7]; m.Through != 6 || m.Above != nil || m.Held != nil {
		t.Fatalf("mark %+v, want through 6", m)
	}
}

func TestReleasable(t *testing.T) {
	f := func(t *testing.T, m delivery.Mark, want bool) {
		t.Helper()
		marks := map[uint32]*delivery.Mark{1: &m}
		if got := Releasable(marks); got != want {
			t.Fatalf("%+v: releasable %v, want %v", m, got, want)
		}
		if m.Through != marks[1].Through {
			t.Fatalf("Releasable changed the marks")
		}
	}
	t.Run("next held", func(t *testing.T) { f(t, delivery.Mark{Through: 2, Held: []delivery.Held{{Seq: 3}}}, true) })
	t.Run("above a gap", func(t *testing.T) { f(t, delivery.Mark{Through: 2, Held: []delivery.Held{{Seq: 4}}}, false) })
	t.Run("none held", func(t *testing.T) { f(t, delivery.Mark{Through: 2}, false) })
	t.Run("after legacy above", func(t *testing.T) {
		f(t, delivery.Mark{Through: 2, Above: []uint64{3}, Held: []delivery.Held{{Seq: 4}}}, true)
	})
}
