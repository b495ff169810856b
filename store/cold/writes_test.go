package cold_test

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/cold/coldtest"
)

// A transaction's writes applied to another database leave it as the transaction left
// its own: each key once as the commit writes it — set, set again, deleted, deleted and
// set again, values empty and of kilobytes — over keys both held before.
func TestWritesApplyAsCommitted(t *testing.T) {
	a, b := coldtest.Open(t, cold.Options{}), coldtest.Open(t, cold.Options{})
	key := func(i int) []byte { return fmt.Appendf(nil, "k%04d", i) }
	r := rand.New(rand.NewPCG(1, 2))
	for _, db := range []*cold.DB{a, b} { // the same keys before
		err := db.Update(func(txn *cold.Txn) error {
			for i := range 200 {
				if err := txn.Set(key(i), fmt.Appendf(nil, "old%d", i)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for round := range 5 {
		var writes []byte
		err := a.Update(func(txn *cold.Txn) error {
			for range 300 {
				k := key(r.IntN(400))
				switch r.IntN(4) {
				case 0:
					if err := txn.Delete(k); err != nil {
						return err
					}
				case 1:
					if err := txn.Set(k, nil); err != nil {
						return err
					}
				default:
					if err := txn.Set(k, bytes.Repeat([]byte{byte(round)}, r.IntN(3000))); err != nil {
						return err
					}
				}
			}
			var ok bool
			if writes, ok = txn.AppendWrites(nil, 1<<30); !ok {
				return errors.New("writes did not fit in 1 GiB")
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Update(func(txn *cold.Txn) error { return txn.ApplyWrites(writes) }); err != nil {
			t.Fatal(err)
		}
		if got, want := coldtest.All(t, b), coldtest.All(t, a); !maps.EqualFunc(got, want, bytes.Equal) {
			t.Fatalf("round %d: the database the writes were applied to differs from the one that wrote them", round)
		}
	}
}

// Writes past the limit are not recorded, and what was given is given back as it was;
// a record cut short or of an unknown kind is refused as corrupt, and the transaction
// that applied it, discarded, commits none of it.
func TestWritesBounded(t *testing.T) {
	db := coldtest.Open(t, cold.Options{})
	txn := db.NewTxn(true)
	defer txn.Discard()
	for i := range 10 {
		if err := txn.Set(fmt.Appendf(nil, "key%d", i), make([]byte, 100)); err != nil {
			t.Fatal(err)
		}
	}
	prefix := []byte("before")
	if got, ok := txn.AppendWrites(prefix, 500); ok || !bytes.Equal(got, prefix) {
		t.Fatalf("1 100 bytes of writes in a limit of 500: ok %v, %q", ok, got)
	}
	all, ok := txn.AppendWrites(nil, 2000)
	if !ok {
		t.Fatal("1 100 bytes of writes in a limit of 2 000: not recorded")
	}
	for _, bad := range [][]byte{all[:len(all)-1], append([]byte{7}, all...), append(append([]byte{}, all...), 1, 200)} {
		other := coldtest.Open(t, cold.Options{})
		err := other.Update(func(txn *cold.Txn) error { return txn.ApplyWrites(bad) })
		if !errors.Is(err, cold.ErrCorrupt) {
			t.Fatalf("applying a damaged record: %v, want ErrCorrupt", err)
		}
		if c := coldtest.All(t, other); len(c) != 0 {
			t.Fatalf("a damaged record applied in part: %d keys", len(c))
		}
	}
}
