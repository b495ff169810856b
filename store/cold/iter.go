package cold

import "github.com/dgraph-io/badger/v4"

// IteratorOptions say what an Iterator reads: the keys under Prefix, with their values
// fetched ahead (PrefetchSize at a time) when PrefetchValues, last first when Reverse.
// They are Badger's, so the store packages that walk keys need not import it.
type IteratorOptions struct {
	Prefix         []byte
	PrefetchValues bool
	PrefetchSize   int
	Reverse        bool
}

// Iterator walks the keys of a transaction in order, for the store packages that seek
// within a prefix (Scan walks it whole). It forwards to Badger's without allocating;
// Close it before the transaction ends.
type Iterator struct{ it *badger.Iterator }

// Iterator starts an Iterator over the transaction's keys.
func (t *Txn) Iterator(o IteratorOptions) Iterator {
	return Iterator{it: t.b.NewIterator(badger.IteratorOptions{
		Prefix: o.Prefix, PrefetchValues: o.PrefetchValues, PrefetchSize: o.PrefetchSize, Reverse: o.Reverse,
	})}
}

// Seek moves to k, or to the first key after it (before it when Reverse).
func (i Iterator) Seek(k []byte) { i.it.Seek(k) }

// Rewind moves to the first key.
func (i Iterator) Rewind() { i.it.Rewind() }

// Next moves to the next key.
func (i Iterator) Next() { i.it.Next() }

// ValidForPrefix reports whether the iterator is at a key under prefix.
func (i Iterator) ValidForPrefix(prefix []byte) bool { return i.it.ValidForPrefix(prefix) }

// Key is the key the iterator is at, valid until it moves.
func (i Iterator) Key() []byte { return i.it.Item().Key() }

// KeyCopy appends the key the iterator is at to dst.
func (i Iterator) KeyCopy(dst []byte) []byte { return i.it.Item().KeyCopy(dst) }

// Value calls fn with the value of the key the iterator is at, valid until fn returns.
func (i Iterator) Value(fn func(v []byte) error) error { return i.it.Item().Value(fn) }

// ValueCopy appends the value of the key the iterator is at to dst.
func (i Iterator) ValueCopy(dst []byte) ([]byte, error) { return i.it.Item().ValueCopy(dst) }

// Close ends the iteration.
func (i Iterator) Close() { i.it.Close() }

// Batch writes many keys outside a transaction, in as many commits as they take: for
// writes that need not be atomic (deleting garbage, moving keys that a crash moves
// again). Cancel it when done, Flush to write.
type Batch struct {
	wb     *badger.WriteBatch
	writes int64 // keys set or deleted since the last flush (Counted)
}

// NewBatch starts a Batch.
func (d *DB) NewBatch() *Batch { return &Batch{wb: d.db.NewWriteBatch()} }

// Set writes v under k.
func (b *Batch) Set(k, v []byte) error {
	b.writes++
	return b.wb.Set(k, v)
}

// Delete deletes k.
func (b *Batch) Delete(k []byte) error {
	b.writes++
	return b.wb.Delete(k)
}

// Flush writes what the batch holds.
func (b *Batch) Flush() error {
	err := b.wb.Flush()
	if err == nil {
		counted.writes.Add(b.writes)
	}
	b.writes = 0
	return err
}

// Cancel drops what was not flushed; after Flush it does nothing.
func (b *Batch) Cancel() { b.wb.Cancel() }
