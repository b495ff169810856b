package graph

import "github.com/tally-dev/tally/store/cold"

// FirstKey is, for the package's external tests, the first key of txn under prefix.
func FirstKey(txn *cold.Txn, prefix []byte) ([]byte, bool) {
	it := txn.Iterator(cold.IteratorOptions{Prefix: prefix})
	defer it.Close()
	it.Rewind()
	if !it.ValidForPrefix(prefix) {
		return nil, false
	}
	return it.KeyCopy(nil), true
}
