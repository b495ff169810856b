package cold

// FirstKey is, for the package's external tests, the first key of txn under prefix.
func FirstKey(txn *Txn, prefix []byte) ([]byte, bool) {
	it := txn.Iterator(IteratorOptions{Prefix: prefix})
	defer it.Close()
	it.Rewind()
	if !it.ValidForPrefix(prefix) {
		return nil, false
	}
	return it.KeyCopy(nil), true
}
