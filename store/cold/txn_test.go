package cold_test

import (
	"encoding/binary"
	"errors"
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
