package graph_test

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"

	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/cold/coldtest"
	"github.com/tally-dev/tally/store/graph"
	"github.com/tally-dev/tally/store/unread"
)

// oldKey builds a key of the layout before partitions: a namespace byte and big-endian
// fields (a single byte for a kind).
func oldKey(ns byte, fields ...any) []byte {
	k := []byte{ns}
	for _, f := range fields {
		switch f := f.(type) {
		case byte:
			k = append(k, f)
		case uint64:
			k = binary.BigEndian.AppendUint64(k, f)
		}
	}
	return k
}

// TestMigrate moves a database of the old layout under partitions: each key goes to the
// partition that owns it now, and the old keys are gone.
func TestMigrate(t *testing.T) {
	db := coldtest.Open(t, cold.Options{})
	u64 := func(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }
	inv := func(ts uint64) uint64 { return math.MaxUint64 - ts }
	old := map[string][]byte{
		// user 7 likes post 100 at time 5 and follows user 9 at time 6
		string(oldKey('r', byte('l'), uint64(7), uint64(100), uint64(0))):         append(u64(5), u64(50)...),
		string(oldKey('s', byte('l'), uint64(7), inv(5), uint64(100), uint64(0))): nil,
		string(oldKey('o', byte('l'), uint64(100), inv(5), uint64(7), uint64(0))): nil,
		string(oldKey('r', byte('f'), uint64(7), uint64(9), uint64(0))):           append(u64(6), u64(60)...),
		string(oldKey('s', byte('f'), uint64(7), inv(6), uint64(9), uint64(0))):   nil,
		string(oldKey('o', byte('f'), uint64(9), inv(6), uint64(7), uint64(0))):   nil,
		// user 7 has read state and one notification; author 9 posted once pushed and once pulled
		string(oldKey('v', uint64(7))):                           {0x80}, // an empty MessagePack map
		string(oldKey('n', uint64(7), byte('l'), uint64(70))):    nil,
		string(oldKey('e', uint64(9), uint64(80), uint64(1000))): {1},
		string(oldKey('e', uint64(9), uint64(90), uint64(1001))): {0},
		string(oldKey('q', uint64(9))):                           nil,
		string(oldKey('u', uint64(7))):                           {1},
	}
	if err := db.Update(func(txn *cold.Txn) error {
		for k, v := range old {
			if err := txn.Set([]byte(k), v); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	const parts = 4
	partOf := func(id uint64) int { return int(id % parts) } // 7 → 3, 9 → 1, 100 → 0
	moved, err := graph.Migrate(db, parts, partOf)
	// and then the like's relation and list keys once more, to a like record and a chunk
	if err != nil || moved != len(old)+2 {
		t.Fatalf("Migrate moved %d keys, %v; want %d", moved, err, len(old)+2)
	}
	list := func(p int, k graph.Kind, bySubject bool, id uint64) []uint64 {
		t.Helper()
		items, _, err := graph.List(db, p, k, bySubject, id, 10, "")
		if err != nil {
			t.Fatal(err)
		}
		var ids []uint64
		for _, it := range items {
			ids = append(ids, it.ID)
		}
		return ids
	}
	for name, c := range map[string]struct {
		got  []uint64
		want uint64
	}{
		"likes of user 7 in its partition":                {list(3, graph.Like, true, 7), 100},
		"likers of post 100 in the liker's partition":     {list(3, graph.Like, false, 100), 7},
		"whom 7 follows in 7's partition":                 {list(3, graph.Follow, true, 7), 9},
		"followers of 9 in the followed user's partition": {list(1, graph.Follow, false, 9), 7},
	} {
		if len(c.got) != 1 || c.got[0] != c.want {
			t.Errorf("%s: %v, want [%d]", name, c.got, c.want)
		}
	}
	if got := list(3, graph.Follow, false, 9); len(got) != 0 {
		t.Errorf("followers of 9 left in the follower's partition: %v", got)
	}
	if liked, err := graph.Related(db, 3, graph.Like, 7, []uint64{100, 101}); err != nil || !liked[0] || liked[1] {
		t.Errorf("Related = %v, %v", liked, err)
	}
	err = db.View(func(txn *cold.Txn) error {
		if n := unread.CountNotified(txn, 3, 7, "like", 0); n != 1 {
			t.Errorf("user 7's notifications: %d, want 1", n)
		}
		if _, err := unread.GetReader(txn, 3, 7); err != nil {
			t.Errorf("user 7's reader state: %v", err)
		}
		if n, err := unread.CountPosts(txn, 1, 9, 0, true, 10); n != 1 || err != nil {
			t.Errorf("author 9's pushed posts: %d, %v; want 1", n, err)
		}
		for q := range parts { // a pulled post is in every partition
			if n := unread.CountPulled(txn, q, 9, 0, 10); n != 1 {
				t.Errorf("partition %d: author 9's pulled posts: %d, want 1", q, n)
			}
			if n := unread.CountPulled(txn, q, 9, 90, 10); n != 0 {
				t.Errorf("partition %d: pulled posts after 90: %d, want 0", q, n)
			}
		}
		for _, ns := range []byte("rsovneqtuy") {
			if k, ok := graph.FirstKey(txn, []byte{ns}); ok {
				t.Errorf("an old key is left: %x", k)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for q := range parts {
		pl, err := unread.LoadPulled(db, q)
		if err != nil || !pl.Has(9) || pl.Has(7) {
			t.Errorf("partition %d's pulled authors: has 9 %v, has 7 %v, %v", q, pl.Has(9), pl.Has(7), err)
		}
	}
	if moved, err := graph.Migrate(db, parts, partOf); moved != 0 || err != nil {
		t.Fatalf("second Migrate moved %d, %v; want nothing", moved, err)
	}
	// Partition 3's backup holds its own keys only: restored elsewhere, 7's likes are
	// there and 9's followers (partition 1's) are not.
	var buf bytes.Buffer
	if err := db.Backup(&buf, cold.EventKeys(3)); err != nil {
		t.Fatal(err)
	}
	other := coldtest.Open(t, cold.Options{})
	if err := other.Restore(&buf, cold.EventKeys(3), t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if items, _, _ := graph.List(other, 3, graph.Like, true, 7, 10, ""); len(items) != 1 {
		t.Errorf("partition 3 restored: likes of 7 = %v", items)
	}
	if items, _, _ := graph.List(other, 1, graph.Follow, false, 9, 10, ""); len(items) != 0 {
		t.Errorf("partition 3's backup carried partition 1's followers: %v", items)
	}
}
