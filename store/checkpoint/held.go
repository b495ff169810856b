package checkpoint

import (
	"fmt"

	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/delivery"
	"github.com/tally-dev/tally/store/internal/keys"
)

// Delta batches a counter partition holds above a gap (stages/hop) keep their payload
// under a key of their own, w|family|p|'h'|src|seq: under the partition's meta key, so
// that cold.CounterKeys — a backup, a restore, a clear — carries them with the
// checkpoint whose marks hold them. A payload is written in a transaction of its own when the batch
// is held (before any checkpoint can name it) and deleted by the checkpoint whose marks
// no longer hold it (Changes.Released), so every checkpoint finds the payloads it holds.

func heldPrefix(family string, p int) keys.Key { return keys.Meta(family, p).U8(keys.NSHeld) }
func heldKey(family string, p int, r delivery.HeldRef) keys.Key {
	return heldPrefix(family, p).U32(r.Src).U64(r.Seq)
}

// PutHeld stores the payload of held batch r of (family, p) at once. Writing it again is
// harmless: a batch is held with the same payload whoever receives it again.
func PutHeld(db *cold.DB, family string, p int, r delivery.HeldRef, data []byte) error {
	err := db.Update(func(txn *cold.Txn) error { return txn.Set(heldKey(family, p, r), data) })
	if err != nil {
		return fmt.Errorf("held batch %d/%d of %s/%d: %w", r.Src, r.Seq, family, p, err)
	}
	return nil
}

// GetHeld returns the payload of held batch r of (family, p); a missing one is
// ErrCorrupt: the checkpoint that holds it was written after it.
func GetHeld(db *cold.DB, family string, p int, r delivery.HeldRef) ([]byte, error) {
	var data []byte
	err := db.View(func(txn *cold.Txn) (err error) {
		data, err = delivery.Payload(txn, heldKey(family, p, r))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("held batch %d/%d of %s/%d: %w", r.Src, r.Seq, family, p, err)
	}
	return data, nil
}

// HeldRefs lists the held batches whose payloads (family, p) stores.
func HeldRefs(db *cold.DB, family string, p int) ([]delivery.HeldRef, error) {
	var out []delivery.HeldRef
	err := db.View(func(txn *cold.Txn) error {
		prefix := heldPrefix(family, p)
		it := txn.Iterator(cold.IteratorOptions{Prefix: prefix})
		defer it.Close()
		for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
			k := it.Key()
			if len(k) != len(prefix)+12 {
				return fmt.Errorf("%w: held batch key of %d bytes", cold.ErrCorrupt, len(k))
			}
			out = append(out, delivery.HeldRef{Src: keys.U32At(k, len(prefix)), Seq: keys.U64At(k, len(prefix)+4)})
		}
		return nil
	})
	return out, err
}

// DeleteHeld deletes the payloads of held batches of (family, p) that no checkpoint
// holds (written just before a crash, and not held again). Not atomically: each is
// garbage, whatever is deleted of the others.
func DeleteHeld(db *cold.DB, family string, p int, refs []delivery.HeldRef) error {
	if len(refs) == 0 {
		return nil
	}
	wb := db.NewBatch()
	defer wb.Cancel()
	for _, r := range refs {
		if err := wb.Delete(heldKey(family, p, r)); err != nil {
			return fmt.Errorf("held batches of %s/%d: %w", family, p, err)
		}
	}
	if err := wb.Flush(); err != nil {
		return fmt.Errorf("held batches of %s/%d: %w", family, p, err)
	}
	return nil
}

func deleteHeld(txn *cold.Txn, family string, p int, refs []delivery.HeldRef) error {
	for _, r := range refs {
		if err := txn.Delete(heldKey(family, p, r)); err != nil {
			return err
		}
	}
	return nil
}
