package cold_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tally-dev/tally/store/cold"
)

// Keys looked for while memtables are flushed and compactions move tables between
// levels are always found, each with its newest value committed or a newer one: a
// get lists the tables of every level under one lock (Badger patched: the levels'
// view lock), which every change to a level's tables is made under. The race
// detector checks the lists are never read while they change.
func TestReadsThroughCompactions(t *testing.T) {
	db, err := cold.Open(cold.WithLevelZero(cold.Options{Dir: t.TempDir(), MemTableSize: 1 << 20, NumMemtables: 2}, 2))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	const keys, perTxn = 4000, 500
	rounds := 40
	if testing.Short() {
		rounds = 16
	}
	pad := bytes.Repeat([]byte{'t'}, 120)
	value := func(round int) []byte {
		return binary.BigEndian.AppendUint64(append([]byte(nil), pad...), uint64(round))
	}
	roundOf := func(v []byte) int { return int(binary.BigEndian.Uint64(v[len(v)-8:])) }

	var done atomic.Int64 // the last round committed whole
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	deeper := map[uint64]bool{} // tables seen below level 0
	wg.Go(func() {
		defer done.Store(-1)
		for r := 1; r <= rounds; r++ {
			for from := 0; from < keys; from += perTxn {
				err := db.Update(func(txn *cold.Txn) error {
					for i := from; i < from+perTxn; i++ {
						if err := txn.Set(tableKey(uint64(i)), value(r)); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					errs <- err
					return
				}
			}
			done.Store(int64(r))
			for _, ti := range cold.Tables(db) {
				if ti.Level > 0 {
					deeper[ti.ID] = true
				}
			}
		}
	})
	reads := make([]int, 3)
	for g := range reads {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 7))
			for {
				d := int(done.Load())
				if d < 0 {
					return
				}
				i := r.IntN(keys)
				var got int
				err := db.View(func(txn *cold.Txn) error {
					ok, err := txn.Get(tableKey(uint64(i)), func(v []byte) error { got = roundOf(v); return nil })
					if err == nil && !ok && d > 0 {
						err = fmt.Errorf("key %d not found after round %d", i, d)
					}
					return err
				})
				// committed whole before the read began, and not past the round after
				// the last one committed whole once it ended
				if after := int(done.Load()); err == nil && d > 0 && (got < d || after >= 0 && got > after+1) {
					err = fmt.Errorf("key %d of round %d read after round %d was committed, and before round %d was", i, got, d, after+2)
				}
				if err != nil {
					errs <- err
					return
				}
				reads[g]++
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if len(deeper) < 4 {
		t.Fatalf("%d tables seen below level 0: too few compactions for the test to mean anything", len(deeper))
	}
	t.Logf("%d rounds of %d keys, %v reads, %d tables seen below level 0", rounds, keys, reads, len(deeper))
}
