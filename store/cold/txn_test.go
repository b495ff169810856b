package cold_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/delivery"
	"github.com/tally-dev/tally/store/stagelog"
)

// A transaction past what the database takes in one commit fails with cold's own
// sentinel, which the event stage checks to cut its work smaller: Badger's error does
// not reach it.
func TestTxnTooBig(t *testing.T) {
	db, err := cold.Open(cold.Options{Dir: t.TempDir(), MemTableSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	err = db.Update(func(txn *cold.Txn) error {
		for i := range uint64(1 << 20) {
			if err := stagelog.PutOutbox(txn, 0, &delivery.OutboxEntry{Seq: i, Subject: "s", Data: binary.BigEndian.AppendUint64(nil, i)}); err != nil {
				return err
			}
		}
		return nil
	})
	if !errors.Is(err, cold.ErrTxnTooBig) {
		t.Fatalf("a transaction of a million writes: %v, want ErrTxnTooBig", err)
	}
	// The refused transaction wrote nothing.
	if _, out, err := stagelog.Load(db, 0); err != nil || len(out) != 0 {
		t.Fatalf("after the refused transaction: %d outbox entries, %v", len(out), err)
	}
}

// FillWith measures a transaction as Badger bounds it: a write is refused exactly when
// it would take the fill to 1 — by bytes (values in the LSM tree, and pointers to those in the
// value log) or by entries (many small writes and deletes) — so that a stage can stop
// taking work before Badger refuses it rather than throw the work away after.
func TestFillIsBadgersBound(t *testing.T) {
	db, err := cold.Open(cold.Options{Dir: t.TempDir(), MemTableSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	r := rand.New(rand.NewPCG(3, 4))
	for _, c := range []struct {
		name   string
		values func() int
		del    bool
	}{
		{"small values: bound by entries", func() int { return r.IntN(8) }, false},
		{"deletes", func() int { return 0 }, true},
		{"values up to 4 KiB: bound by bytes", func() int { return r.IntN(4096) }, false},
		{"values past the threshold go to the value log", func() int { return 70_000 + r.IntN(10_000) }, false},
	} {
		txn := db.NewTxn(true)
		var last float64
		for i := 0; ; i++ {
			k := binary.BigEndian.AppendUint64([]byte("fill"), uint64(i))
			if c.del {
				err = txn.Delete(k)
			} else {
				err = txn.Set(k, make([]byte, c.values()))
			}
			if errors.Is(err, cold.ErrTxnTooBig) {
				if last >= 1 || last < 0.97 {
					t.Errorf("%s: refused after %d writes at fill %.4f, want just under 1", c.name, i, last)
				}
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if f := txn.FillWith(0, 0); f <= last || f >= 1 {
				t.Fatalf("%s: write %d took fill from %.4f to %.4f", c.name, i, last, f)
			}
			last = txn.FillWith(0, 0)
		}
		txn.Discard()
	}
}

// What a transaction sets and deletes is what it reads back, before and after its
// commit, with keys of every length up to past where Badger's transaction stops
// keeping them in its blocks of key bytes (store/cold/badger/PATCHES.md), and keys set
// again and deleted in the same transaction; and a scan of the database after each
// commit finds every live key once, in order: each transaction's keys go into the
// memtable's skiplist in their order, each searched for from where the one before went
// (skl.Hint), among those of the transactions before.
func TestTxnReadsWhatItWrote(t *testing.T) {
	t.Run("memtable", func(t *testing.T) { txnReadsWhatItWrote(t, cold.Options{Dir: t.TempDir()}, 20) })
	// Memtables of 4 MiB, flushed every ten rounds or so, so that the keys not written
	// since are read from tables, through their Bloom filters, as compactions move them.
	t.Run("tables", func(t *testing.T) {
		db := txnReadsWhatItWrote(t, cold.Options{Dir: t.TempDir(), MemTableSize: 4 << 20, NumMemtables: 2}, 80)
		if len(cold.Tables(db)) == 0 {
			t.Error("no table written: the keys were read from memtables only")
		}
	})
}

func txnReadsWhatItWrote(t *testing.T, o cold.Options, rounds int) *cold.DB {
	db, err := cold.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	r := rand.New(rand.NewPCG(5, 6))
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	}
	// 3 000 keys of 4 to 400 bytes, so that each transaction sets some again; a third
	// share their first 20 bytes, which a commit's sort reads past.
	names := make([][]byte, 3000)
	for i := range names {
		if i%3 == 0 {
			names[i] = []byte("a prefix of 20 bytes")
		}
		names[i] = binary.BigEndian.AppendUint32(names[i], uint32(i))
		names[i] = append(names[i], random(r.IntN(397))...)
	}
	want := map[string][]byte{} // nil: deleted
	// check reads the keys given back through txn; nil: every key written so far.
	check := func(txn *cold.Txn, keys []string, when string) {
		t.Helper()
		if keys == nil {
			keys = slices.Collect(maps.Keys(want))
		}
		for _, k := range keys {
			v := want[k]
			var got []byte
			found, err := txn.Get([]byte(k), func(b []byte) error { got = append([]byte{}, b...); return nil })
			switch {
			case err != nil:
				t.Fatalf("%s: key of %d bytes: %v", when, len(k), err)
			case found != (v != nil) || string(got) != string(v):
				t.Fatalf("%s: key of %d bytes: found %v, %d bytes; want found %v, %d bytes", when, len(k), found, len(got), v != nil, len(v))
			}
		}
	}
	// scan reads every key under prefix through txn (nil: as committed) in order: the
	// writes of a transaction are merged, sorted, with what is committed (those under
	// the prefix only, which is all a scan may return).
	scan := func(txn *cold.Txn, prefix []byte, when string) {
		t.Helper()
		live := 0
		for k, v := range want {
			if v != nil && strings.HasPrefix(k, string(prefix)) {
				live++
			}
		}
		var last []byte
		n := 0
		read := func(txn *cold.Txn) error {
			return txn.Scan(prefix, nil, true, func(k, v []byte) (bool, error) {
				if !bytes.HasPrefix(k, prefix) {
					return false, fmt.Errorf("key %x outside prefix %x", k, prefix)
				}
				if last != nil && bytes.Compare(last, k) >= 0 {
					return false, fmt.Errorf("key %x after %x", k, last)
				}
				if w, ok := want[string(k)]; !ok || w == nil || !bytes.Equal(w, v) {
					return false, fmt.Errorf("key %x: %d bytes, want %d (written %v)", k, len(v), len(w), ok)
				}
				last, n = append(last[:0], k...), n+1
				return true, nil
			})
		}
		var err error
		if txn != nil {
			err = read(txn)
		} else {
			err = db.View(read)
		}
		if err == nil && n != live {
			err = fmt.Errorf("%d keys scanned, %d live", n, live)
		}
		if err != nil {
			t.Fatalf("%s, prefix %x: %v", when, prefix, err)
		}
	}
	// The prefixes scanned: each round a key's first three bytes (the ~170 keys whose
	// numbers share their high byte, some written by the round, some before) and first
	// five (that key alone, or none once deleted); every sixteenth round and the last, the
	// shared one and none as well (the whole database: what makes the test slow).
	prefixes := func(full bool) [][]byte {
		k := names[1+3*r.IntN(len(names)/3-1)]
		if !full {
			return [][]byte{k[:3], k[:5]}
		}
		return [][]byte{nil, []byte("a prefix of 20 bytes"), k[:3], k[:5]}
	}
	for round := range rounds {
		// Each round reads back what it wrote and 300 keys of any round; every sixteenth
		// and the last, every key written so far.
		full := round%16 == 15 || round == rounds-1
		var keys []string
		txn := db.NewTxn(true)
		for range 1500 {
			// Each write its own key bytes, as Badger asks: it holds them until the commit.
			k := append([]byte{}, names[r.IntN(len(names))]...)
			if !full {
				keys = append(keys, string(k))
			}
			if r.IntN(5) == 0 {
				if err := txn.Delete(k); err != nil {
					t.Fatal(err)
				}
				want[string(k)] = nil
				continue
			}
			v := random(1 + r.IntN(100))
			if err := txn.Set(k, v); err != nil {
				t.Fatal(err)
			}
			want[string(k)] = v
		}
		if !full {
			for range 300 { // a name never written is read as not found
				keys = append(keys, string(names[r.IntN(len(names))]))
			}
		}
		check(txn, keys, fmt.Sprintf("round %d, before its commit", round))
		ps := prefixes(full)
		for _, p := range ps {
			scan(txn, p, fmt.Sprintf("round %d, scanned before its commit", round))
		}
		if err := txn.Commit(); err != nil {
			t.Fatal(err)
		}
		txn = db.NewTxn(false)
		check(txn, keys, fmt.Sprintf("round %d, after its commit", round))
		txn.Discard()
		for _, p := range ps {
			scan(nil, p, fmt.Sprintf("round %d, scanned", round))
		}
	}
	return db
}

// A transaction thrown away leaves none of its writes to the transactions after it,
// which take the map of pending writes it emptied (store/cold/badger/PATCHES.md): each
// round writes keys and is discarded, and the next, which writes other keys, reads
// and scans only its own and what was committed.
func TestDiscardedWritesGone(t *testing.T) {
	db, err := cold.Open(cold.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	key := func(round, i int) []byte { return fmt.Appendf(nil, "k%03d-%04d", round, i) }
	commit := db.NewTxn(true)
	if err := commit.Set([]byte("committed"), []byte("yes")); err != nil {
		t.Fatal(err)
	}
	if err := commit.Commit(); err != nil {
		t.Fatal(err)
	}
	for round := range 50 {
		txn := db.NewTxn(true)
		if round > 0 {
			// The round before's keys were discarded.
			for i := range 300 {
				found, err := txn.Get(key(round-1, i), func([]byte) error { return nil })
				if err != nil || found {
					t.Fatalf("round %d: key %d of the discarded round before: found %v, %v", round, i, found, err)
				}
			}
		}
		for i := range 300 {
			if err := txn.Set(key(round, i), []byte("v")); err != nil {
				t.Fatal(err)
			}
		}
		n := 0
		err := txn.Scan([]byte("k"), nil, false, func(k, _ []byte) (bool, error) {
			if !bytes.HasPrefix(k, fmt.Appendf(nil, "k%03d-", round)) {
				return false, fmt.Errorf("key %q of another round", k)
			}
			n++
			return true, nil
		})
		if err == nil && n != 300 {
			err = fmt.Errorf("%d keys scanned, want 300", n)
		}
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if found, err := txn.Get([]byte("committed"), func([]byte) error { return nil }); err != nil || !found {
			t.Fatalf("round %d: the committed key: found %v, %v", round, found, err)
		}
		txn.Discard()
	}
}
