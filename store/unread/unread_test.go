package unread

import (
	"testing"

	"github.com/tally-dev/tally/store/cold"
)

func openDB(t testing.TB) *cold.DB {
	t.Helper()
	db, err := cold.Open(cold.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}
