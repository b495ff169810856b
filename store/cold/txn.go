package cold

import (
	"errors"
	"sync/atomic"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/skl"
)

// Txn is one transaction of the database: what a stage reads and writes atomically
// (its state change, outbox and position). It wraps Badger's so that no package outside
// store/ depends on Badger; its methods forward without allocating, and turn Badger's
// refusal of a transaction too big into ErrTxnTooBig.
type Txn struct {
	b *badger.Txn
	// size and count are what the transaction has written by Badger's own measure (its
	// checkSize), against the bounds lim: see FillWith.
	size, count int64
	lim         *limits
	gets        int64 // keys looked for, added to counted when the transaction ends
}

// Counts are what the transactions of this process have read and written, over every
// database it opened (Counted). Badger's own counters (its expvar metrics) are off: it
// counted each key looked for at each level of its tree in a map shared by every
// goroutine, 6 % of the CPU of a like (docs/performance.md).
type Counts struct {
	Gets   int64 // keys looked for (Txn.Get)
	Writes int64 // keys written by transactions committed (each once a transaction) and batches flushed
	Bytes  int64 // what those writes took, by Badger's measure of a transaction (Txn.wrote)
}

// counted is Counted's, added to once a transaction (or a batch's flush), not a key.
var counted struct{ gets, writes, bytes atomic.Int64 }

// Counted is what the process's transactions have read and written so far.
func Counted() Counts {
	return Counts{Gets: counted.gets.Load(), Writes: counted.writes.Load(), Bytes: counted.bytes.Load()}
}

// limits are Badger's bounds of one transaction, as Badger derives them from the
// options (DB.Open): 15 % of a memtable, and that many bytes in nodes of its skiplist.
type limits struct{ size, count, valueThreshold int64 }

func newLimits(memTableSize, valueThreshold int64) limits {
	size := 15 * memTableSize / 100
	return limits{size: size, count: size / int64(skl.MaxNodeSize), valueThreshold: valueThreshold}
}

// NewTxn starts a transaction, one that may write when update is true. The caller
// commits it or discards it (Discard after Commit does nothing).
func (d *DB) NewTxn(update bool) *Txn { return &Txn{b: d.db.NewTransaction(update), lim: &d.lim} }

// Update runs fn in a transaction that writes, committed when fn returns nil (as
// Badger's Update does, through Commit and Discard, which count what it did).
func (d *DB) Update(fn func(txn *Txn) error) error {
	t := d.NewTxn(true)
	defer t.Discard()
	if err := fn(t); err != nil {
		return tooBig(err)
	}
	return t.Commit()
}

// View runs fn in a transaction that only reads.
func (d *DB) View(fn func(txn *Txn) error) error {
	t := d.NewTxn(false)
	defer t.Discard()
	return fn(t)
}

// Commit commits the transaction's writes.
func (t *Txn) Commit() error {
	keys := int64(t.b.Writes()) // what it writes (Counted), taken before the commit gives them up
	err := t.b.Commit()
	if err == nil && keys > 0 {
		counted.writes.Add(keys)
		counted.bytes.Add(t.size)
	}
	t.ended()
	return tooBig(err)
}

// Discard ends the transaction without writing; after Commit it does nothing.
func (t *Txn) Discard() {
	t.b.Discard()
	t.ended()
}

// ended counts the keys a transaction ending has looked for (Counted).
func (t *Txn) ended() {
	if t.gets > 0 {
		counted.gets.Add(t.gets)
		t.gets = 0
	}
}

// Set writes v under k. The store's functions build keys and values; tests and tools
// writing what an older layout held use it raw.
func (t *Txn) Set(k, v []byte) error {
	if err := t.b.Set(k, v); err != nil {
		return tooBig(err)
	}
	t.wrote(len(k), len(v))
	return nil
}

// Delete deletes k.
func (t *Txn) Delete(k []byte) error {
	if err := t.b.Delete(k); err != nil {
		return tooBig(err)
	}
	t.wrote(len(k), 0)
	return nil
}

// wrote counts a write accepted, as Badger's checkSize does: the key and version (10
// bytes), and the value where it goes in the LSM tree, a pointer where it goes in the
// value log.
func (t *Txn) wrote(k, v int) {
	n := int64(k) + int64(v) + 2 + 10
	if int64(v) >= t.lim.valueThreshold {
		n = int64(k) + 12 + 2 + 10
	}
	t.size, t.count = t.size+n, t.count+1
}

// FillWith is how much of the most one transaction may write it would have written,
// 0 to 1, with bytes more (by Badger's measure) in keys more writes: the larger of its
// bytes and its entries against Badger's bounds. A write that would take it to 1 is
// refused (ErrTxnTooBig). FillWith(0, 0) is what it has written.
func (t *Txn) FillWith(bytes, keys int) float64 {
	return max(float64(t.size+int64(bytes))/float64(t.lim.size), float64(t.count+int64(keys))/float64(t.lim.count))
}

func (t *Txn) get(k []byte) (*badger.Item, error) {
	t.gets++
	return t.b.Get(k)
}

// tooBig maps Badger's ErrTxnTooBig to ErrTxnTooBig, and passes any other error as it is.
func tooBig(err error) error {
	if err != nil && errors.Is(err, badger.ErrTxnTooBig) {
		return ErrTxnTooBig
	}
	return err
}

// Get calls fn with the value of k, if k is there, and reports whether it was; the value
// is valid only until fn returns. fn may be nil.
func (t *Txn) Get(k []byte, fn func(v []byte) error) (bool, error) {
	t.gets++
	item, err := t.b.Get(k)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return false, nil
	} else if err != nil || fn == nil {
		return err == nil, err
	}
	return true, item.Value(fn)
}

// Scan calls fn with every key under prefix from from on (from the first when from is
// nil), in key order, and with its value when values is set (nil otherwise), until fn
// returns false or an error, which it returns. k and v are valid only until fn returns.
func (t *Txn) Scan(prefix, from []byte, values bool, fn func(k, v []byte) (bool, error)) error {
	it := t.b.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: values, PrefetchSize: 100})
	defer it.Close()
	if from == nil {
		from = prefix
	}
	for it.Seek(from); it.ValidForPrefix(prefix); it.Next() {
		item := it.Item()
		more, err := true, error(nil)
		if values {
			err = item.Value(func(v []byte) error { more, err = fn(item.Key(), v); return err })
		} else {
			more, err = fn(item.Key(), nil)
		}
		if err != nil || !more {
			return err
		}
	}
	return nil
}
