package unread

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/cold/coldtest"
	"github.com/tally-dev/tally/store/internal/keys"
)

// TestNotesMatchModel adds, takes back, counts and drops notifications at random, many
// more than a reader state keeps itself (so that they spill to keys), starting from a
// state of the layout before inline notes (every notification a key), and checks every
// count against the set of places a model keeps — after each transaction, read back from
// what was stored.
func TestNotesMatchModel(t *testing.T) {
	const p, uid = 2, 11
	for seed := range uint64(6) {
		r := rand.New(rand.NewPCG(seed, 9))
		db := coldtest.Open(t, cold.Options{})
		model := map[uint64]bool{} // places recorded, not covered by a read
		read, prev := uint64(0), uint64(0)
		place := uint64(0)
		// The old layout: three notifications as keys, the state not inline.
		err := db.Update(func(txn *cold.Txn) error {
			st := ReaderState{}
			for range 3 {
				place += 1 + uint64(r.IntN(3))
				if err := AddNotified(txn, p, uid, "like", place); err != nil {
					return err
				}
				model[place], st.Noted[2] = true, place
			}
			return PutReader(txn, p, uid, st)
		})
		if err != nil {
			t.Fatal(err)
		}
		spilled, chunked := false, 0
		for round := range 200 {
			err := db.Update(func(txn *cold.Txn) error {
				rd := NewReaders(p, nil)
				st, err := rd.Get(txn, uid)
				if err != nil {
					return err
				}
				for range 1 + r.IntN(40) {
					switch op := r.IntN(20); {
					case op < 14: // a notification, placed anywhere after the last read but not where one is recorded
						place += 1 + uint64(r.IntN(3))
						at := read + 1 + uint64(r.IntN(int(place-read)))
						if model[at] {
							break
						}
						rd.AddNote(uid, &st, "like", at)
						model[at] = true
					case op < 16: // one taken back
						for at := range model {
							rd.TakeNote(uid, &st, "like", at)
							delete(model, at)
							break
						}
					case op < 17: // a read
						prev, read = read, read+uint64(r.IntN(int(place-read)+1))
						st.Like = read // as a read event sets it (stages/event)
						if err := rd.DropNotes(txn, uid, &st, "like", prev, read, 256); err != nil {
							return err
						}
						for at := range model {
							if at <= read {
								delete(model, at)
							}
						}
					default: // a count after any place
						after := uint64(r.IntN(int(place) + 1))
						want := 0
						for at := range model {
							if at > after && at > read {
								want++
							}
						}
						if got := rd.CountNotes(txn, uid, &st, "like", max(after, read)); got != uint64(want) {
							t.Fatalf("seed %d round %d: %d notifications after %d, want %d", seed, round, got, max(after, read), want)
						}
					}
				}
				spilled = spilled || len(st.Pending[2]) == maxInlineNotes
				rd.Put(uid, st)
				return rd.Flush(txn, uint64(round+1))
			})
			if err != nil {
				t.Fatal(err)
			}
			err = db.View(func(txn *cold.Txn) error {
				rd := NewReaders(p, nil)
				st, err := rd.Get(txn, uid)
				if got := rd.CountNotes(txn, uid, &st, "like", read); err != nil || got != uint64(len(model)) {
					t.Fatalf("seed %d round %d: %d notifications after the read at %d, want %d (%v)", seed, round, got, read, len(model), err)
				}
				// A read deletes the keys it covers: none is left at or before it.
				for _, c := range chunks(t, txn, p, uid, "like") {
					if c.top <= read {
						t.Fatalf("seed %d round %d: chunk %d of %v after the read at %d", seed, round, c.top, c.at, read)
					}
					chunked = max(chunked, len(c.at))
				}
				for _, c := range chunks(t, txn, p, uid, "Like") {
					if c.top <= read {
						t.Fatalf("seed %d round %d: %d taken back, after the read at %d", seed, round, c.top, read)
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		if !spilled || chunked < 2 {
			t.Fatalf("seed %d: never more than %d notifications, or never two in a chunk (at most %d): the test misses the keys", seed, maxInlineNotes, chunked)
		}
	}
}

// chunk is a stored chunk of notifications: its key's place and the places it holds.
type chunk struct {
	top uint64
	at  []uint64
}

// chunks returns uid's chunks of notifications of kind, in key order ("Like": the places
// of likes taken back).
func chunks(t *testing.T, txn *cold.Txn, p int, uid uint64, kind string) []chunk {
	t.Helper()
	prefix := notifiedPrefix(p, uid, kind)
	var out []chunk
	err := txn.Scan(prefix, nil, true, func(k, v []byte) (bool, error) {
		c := chunk{top: keys.U64At(k, len(prefix))}
		err := readNotes(c.top, v, func(at uint64) { c.at = append(c.at, at) })
		out = append(out, c)
		return true, err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The notifications a transaction records past its user's reader state go under one
// key, whatever their number and order; one taken back in a later transaction is a key
// of its own, which counts subtract, and a read drops both; keys of the layout before
// chunks — one place each — are counted, taken back and dropped with them.
func TestNotesChunkedByTransaction(t *testing.T) {
	const p, uid = 1, 5
	db := coldtest.Open(t, cold.Options{})
	batch := uint64(0)
	update := func(fn func(txn *cold.Txn, rd *Readers, st *ReaderState) error) {
		t.Helper()
		batch++
		err := db.Update(func(txn *cold.Txn) error {
			rd := NewReaders(p, nil)
			st, err := rd.Get(txn, uid)
			if err != nil {
				return err
			}
			if err := fn(txn, rd, &st); err != nil {
				return err
			}
			rd.Put(uid, st)
			return rd.Flush(txn, batch)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	count := func(after uint64) uint64 {
		var n uint64
		_ = db.View(func(txn *cold.Txn) error {
			rd := NewReaders(p, nil)
			st, err := rd.Get(txn, uid)
			n = rd.CountNotes(txn, uid, &st, "like", after)
			return err
		})
		return n
	}
	tops := func(kind string) (out []uint64) {
		_ = db.View(func(txn *cold.Txn) error {
			for _, c := range chunks(t, txn, p, uid, kind) {
				out = append(out, c.top)
			}
			return nil
		})
		return out
	}
	// Two keys of the layout before chunks, past a full state.
	update(func(txn *cold.Txn, rd *Readers, st *ReaderState) error {
		for at := uint64(1); at <= maxInlineNotes; at++ {
			rd.AddNote(uid, st, "like", at)
		}
		st.Keyed[2] = 1001
		if err := AddNotified(txn, p, uid, "like", 1000); err != nil {
			return err
		}
		return AddNotified(txn, p, uid, "like", 1001)
	})
	// 300 more in one transaction, out of order, two of them taken back in it.
	update(func(txn *cold.Txn, rd *Readers, st *ReaderState) error {
		for i := range uint64(300) {
			rd.AddNote(uid, st, "like", 2000+(i*7)%300)
		}
		rd.TakeNote(uid, st, "like", 2000)
		rd.TakeNote(uid, st, "like", 2150)
		return nil
	})
	if got, want := tops("like"), []uint64{1000, 1001, 2299}; !slices.Equal(got, want) {
		t.Fatalf("chunks under %v, want %v", got, want)
	}
	if got := tops("Like"); len(got) != 0 {
		t.Fatalf("taken back in the transaction that recorded them, yet keys: %v", got)
	}
	if n := count(0); n != maxInlineNotes+2+298 {
		t.Fatalf("%d notifications, want %d", n, maxInlineNotes+2+298)
	}
	if n := count(2100); n != 198 {
		t.Fatalf("%d notifications after 2100, want 198", n)
	}
	// Taken back in a later transaction: one from the middle of the chunk, its greatest,
	// an old key; then one recorded again where it was taken back.
	update(func(txn *cold.Txn, rd *Readers, st *ReaderState) error {
		for _, at := range []uint64{2200, 2299, 1000} {
			rd.TakeNote(uid, st, "like", at)
		}
		return nil
	})
	update(func(txn *cold.Txn, rd *Readers, st *ReaderState) error {
		rd.AddNote(uid, st, "like", 2299)
		return nil
	})
	if got, want := tops("Like"), []uint64{1000, 2200, 2299}; !slices.Equal(got, want) {
		t.Fatalf("taken back under %v, want %v", got, want)
	}
	if got, want := tops("like"), []uint64{1000, 1001, 2299, 2299}; !slices.Equal(got, want) {
		t.Fatalf("chunks under %v, want %v", got, want)
	}
	if n := count(2100); n != 197 {
		t.Fatalf("%d notifications after 2100, want 197", n)
	}
	if n := count(0); n != maxInlineNotes+1+297 {
		t.Fatalf("%d notifications, want %d", n, maxInlineNotes+1+297)
	}
	// A read at 2100 drops the keys at or before it; the rest still counts.
	update(func(txn *cold.Txn, rd *Readers, st *ReaderState) error {
		st.Like = 2100
		return rd.DropNotes(txn, uid, st, "like", 0, 2100, 256)
	})
	if got, want := tops("like"), []uint64{2299, 2299}; !slices.Equal(got, want) {
		t.Fatalf("after a read: chunks under %v, want %v", got, want)
	}
	if got, want := tops("Like"), []uint64{2200, 2299}; !slices.Equal(got, want) {
		t.Fatalf("after a read: taken back under %v, want %v", got, want)
	}
	if n := count(2100); n != 197 {
		t.Fatalf("after a read: %d notifications after 2100, want 197", n)
	}
}
