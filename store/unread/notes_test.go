package unread

import (
	"math/rand/v2"
	"testing"

	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/cold/coldtest"
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
		spilled := false
		for round := range 200 {
			err := db.Update(func(txn *cold.Txn) error {
				st, err := GetReader(txn, p, uid)
				if err != nil {
					return err
				}
				for range 1 + r.IntN(8) {
					switch op := r.IntN(20); {
					case op < 14: // a notification, placed anywhere after the last read but not where one is recorded
						place += 1 + uint64(r.IntN(3))
						at := read + 1 + uint64(r.IntN(int(place-read)))
						if model[at] {
							break
						}
						if err := AddNote(txn, p, uid, &st, "like", at); err != nil {
							return err
						}
						model[at] = true
					case op < 16: // one taken back
						for at := range model {
							if err := TakeNote(txn, p, uid, &st, "like", at); err != nil {
								return err
							}
							delete(model, at)
							break
						}
					case op < 17: // a read
						prev, read = read, read+uint64(r.IntN(int(place-read)+1))
						if err := DropNotes(txn, p, uid, &st, "like", prev, read, 256); err != nil {
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
						if got := CountNotes(txn, p, uid, &st, "like", max(after, read)); got != uint64(want) {
							t.Fatalf("seed %d round %d: %d notifications after %d, want %d", seed, round, got, max(after, read), want)
						}
					}
				}
				spilled = spilled || len(st.Pending[2]) == maxInlineNotes
				return PutReader(txn, p, uid, st)
			})
			if err != nil {
				t.Fatal(err)
			}
			err = db.View(func(txn *cold.Txn) error {
				st, err := GetReader(txn, p, uid)
				if got := CountNotes(txn, p, uid, &st, "like", read); err != nil || got != uint64(len(model)) {
					t.Fatalf("seed %d round %d: %d notifications after the read at %d, want %d (%v)", seed, round, got, read, len(model), err)
				}
				// A read deletes the keys it covers: none is left at or before it.
				if n := CountNotified(txn, p, uid, "like", 0) - CountNotified(txn, p, uid, "like", read); n > 0 {
					t.Fatalf("seed %d round %d: %d keys left at or before the read at %d", seed, round, n, read)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		if !spilled {
			t.Fatalf("seed %d: never more than %d notifications: the test misses the keys", seed, maxInlineNotes)
		}
	}
}
