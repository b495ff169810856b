package window

import (
	"encoding/hex"
	"testing"
)

// TestStoredRecordLoads: a record as the checkpoints of the table before this one wrote
// it (AppendRecord's form: an absolute minute, a field byte, a change; the hex below was
// written by that code) loads, answers the same sums and is written back byte for byte,
// whatever form the table keeps in RAM.
func TestStoredRecordLoads(t *testing.T) {
	const now = 29_000_000
	f := func(stored string, since uint32, want ...int64) {
		t.Helper()
		rec, err := hex.DecodeString(stored)
		if err != nil {
			t.Fatal(err)
		}
		tb := New()
		tb.SetFloor(now - 1439)
		if left, err := tb.Put(42, rec); err != nil || !left {
			t.Fatalf("put %s: left %v, %v", stored, left, err)
		}
		got := make([]int64, len(want))
		tb.Sum(42, since, got)
		if !equal(got, want) {
			t.Errorf("%s since %d: got %v, want %v", stored, since, got, want)
		}
		if back := hex.EncodeToString(tb.Record(nil, 42)); back != stored {
			t.Errorf("written back as %s, want %s", back, stored)
		}
	}
	// One like an hour ago: minute 28 999 940, field 0, +1.
	f("8482ea0d0002", now-60, 1)
	f("8482ea0d0002", now-59, 0)
	// A like a day ago, a repost and its undo two minutes apart, a view of +300 and a
	// field 9 change of +2 at now.
	const day = "a1f7e90d0002420102020101db0a03d804000904"
	f(day, now-1439, 1, 0, 0, 300, 0, 0, 0, 0, 0, 2)
	f(day, now-1372, 0, -1, 0, 300, 0, 0, 0, 0, 0, 2)
}
