package cold_test

import (
	"expvar"
	"testing"

	"github.com/tally-dev/tally/store/cold"
)

// The cold tier counts what its transactions read and write itself, once a
// transaction, where Badger counted each key looked for at each level of its tree in
// maps every goroutine shared: Badger's counters stay still.
func TestCountedOnceATransaction(t *testing.T) {
	db, err := cold.Open(cold.Options{Dir: t.TempDir(), MemTableSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	badgerGets := func() int64 { return expvar.Get("badger_get_num_user").(*expvar.Int).Value() }
	before, badger := cold.Counted(), badgerGets()
	since := func() cold.Counts {
		c := cold.Counted()
		return cold.Counts{Gets: c.Gets - before.Gets, Writes: c.Writes - before.Writes, Bytes: c.Bytes - before.Bytes}
	}

	// A key written twice is one entry; a key looked for, found or not, is one get.
	err = db.Update(func(txn *cold.Txn) error {
		for _, k := range []string{"a", "b", "a"} {
			if err := txn.Set([]byte(k), []byte("value")); err != nil {
				return err
			}
		}
		if _, err := txn.Get([]byte("a"), nil); err != nil {
			return err
		}
		return txn.Delete([]byte("c"))
	})
	if err != nil {
		t.Fatal(err)
	}
	if c := since(); c.Writes != 3 || c.Gets != 1 || c.Bytes <= 0 {
		t.Fatalf("after a, b, a set, c deleted and a looked for: %+v, want 3 writes, 1 get and some bytes", c)
	}

	// A transaction discarded wrote nothing, but looked for what it looked for.
	txn := db.NewTxn(true)
	if err := txn.Set([]byte("d"), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := txn.Get([]byte("zz"), nil); err != nil {
		t.Fatal(err)
	}
	txn.Discard()
	txn.Discard()
	// Reads only, and a transaction committed by hand.
	err = db.View(func(txn *cold.Txn) error {
		_, err := txn.Get([]byte("b"), nil)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	txn = db.NewTxn(true)
	if err := txn.Set([]byte("e"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := txn.Commit(); err != nil {
		t.Fatal(err)
	}
	txn.Discard()
	if c := since(); c.Writes != 4 || c.Gets != 3 {
		t.Fatalf("after a discarded write, two more gets and one more key: %+v, want 4 writes and 3 gets", c)
	}
	if got := badgerGets() - badger; got != 0 {
		t.Errorf("Badger counted %d gets: its metrics are on", got)
	}
}
