// Package coldtest opens a database for the store packages' tests: a new one in the
// test's temporary directory, closed when the test ends; and reads all it holds.
package coldtest

import (
	"bytes"
	"testing"

	"github.com/tally-dev/tally/store/cold"
)

// Open opens a database with options o, in a new directory of t's when o.Dir is empty,
// and closes it when t ends.
func Open(t testing.TB, o cold.Options) *cold.DB {
	t.Helper()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	db, err := cold.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// All is every key of db with its value.
func All(t testing.TB, db *cold.DB) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := db.View(func(txn *cold.Txn) error {
		return txn.Scan(nil, nil, true, func(k, v []byte) (bool, error) {
			out[string(k)] = bytes.Clone(v)
			return true, nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
