package cold_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/tally-dev/tally/store/checkpoint"
	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/cold/coldtest"
	"github.com/tally-dev/tally/store/delivery"
	"github.com/tally-dev/tally/store/stagelog"
)

// A backup of one part restored into another database replaces that part there and
// leaves every other key as it was.
func TestBackupRestore(t *testing.T) {
	a, b := coldtest.Open(t, cold.Options{}), coldtest.Open(t, cold.Options{})
	save := func(db *cold.DB, p int, id, pos uint64) {
		t.Helper()
		cp := &checkpoint.Checkpoint{Pos: pos, Marks: map[uint32]*delivery.Mark{}}
		if err := checkpoint.SaveCounters(db, "post", p, []checkpoint.Entry{{ID: id, Counts: []uint64{1, 2, 3, pos}}}, cp, checkpoint.Journal{}); err != nil {
			t.Fatal(err)
		}
	}
	stage := func(db *cold.DB, pos uint64) {
		t.Helper()
		if err := db.Update(func(txn *cold.Txn) error { return stagelog.Put(txn, 0, &stagelog.State{Pos: pos}) }); err != nil {
			t.Fatal(err)
		}
	}
	save(a, 3, 5, 9)
	save(a, 4, 6, 10)
	stage(a, 100)
	save(b, 3, 7, 20) // replaced by a's partition 3
	save(b, 4, 8, 21) // kept
	stage(b, 200)

	counts := func(db *cold.DB, p int, id uint64) (uint64, uint64) {
		t.Helper()
		got := [][]uint64{make([]uint64, 4)}
		if err := checkpoint.Counts(db, "post", p, []uint64{id}, got); err != nil {
			t.Fatal(err)
		}
		cp, err := checkpoint.LoadCheckpoint(db, "post", p)
		if err != nil {
			t.Fatal(err)
		}
		return got[0][3], cp.Pos
	}
	pos := func(db *cold.DB) uint64 {
		st, _, err := stagelog.Load(db, 0)
		if err != nil {
			t.Fatal(err)
		}
		return st.Pos
	}

	var buf bytes.Buffer
	if err := a.Backup(&buf, cold.CounterKeys([]string{"post"}, 3)); err != nil {
		t.Fatal(err)
	}
	backup := buf.Bytes()
	if err := b.Restore(bytes.NewReader(backup), cold.CounterKeys([]string{"post"}, 3), t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if v, cp := counts(b, 3, 5); v != 9 || cp != 9 {
		t.Fatalf("restored partition 3: id 5 = %d, checkpoint %d; want 9, 9", v, cp)
	}
	if v, _ := counts(b, 3, 7); v != 0 {
		t.Fatalf("restored partition 3 still holds id 7 = %d", v)
	}
	if v, cp := counts(b, 4, 8); v != 21 || cp != 21 || pos(b) != 200 {
		t.Fatalf("partition 4 (%d, %d) or the stage (%d) changed", v, cp, pos(b))
	}

	buf.Reset()
	if err := a.Backup(&buf, cold.EventKeys(0)); err != nil {
		t.Fatal(err)
	}
	if err := b.Restore(&buf, cold.EventKeys(0), t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if v, _ := counts(b, 4, 8); pos(b) != 100 || v != 21 {
		t.Fatalf("after the events restore: stage at %d (want 100), partition 4 id 8 = %d (want 21)", pos(b), v)
	}

	// A damaged backup, or one of another part, is refused and changes nothing.
	for name, data := range map[string][]byte{
		"not a backup": []byte("not a backup"),
		"truncated":    backup[:len(backup)-3],
		"flipped":      append(append([]byte(nil), backup[:20]...), append([]byte{backup[20] ^ 1}, backup[21:]...)...),
	} {
		if err := b.Restore(bytes.NewReader(data), cold.CounterKeys([]string{"post"}, 4), t.TempDir()); !errors.Is(err, cold.ErrCorrupt) {
			t.Fatalf("%s: restore error %v, want ErrCorrupt", name, err)
		}
	}
	if err := b.Restore(bytes.NewReader(backup), cold.CounterKeys([]string{"post"}, 4), t.TempDir()); !errors.Is(err, cold.ErrCorrupt) {
		t.Fatalf("partition 3's backup restored as partition 4: %v", err)
	}
	if v, cp := counts(b, 4, 8); v != 21 || cp != 21 {
		t.Fatalf("a refused restore changed partition 4: %d, %d", v, cp)
	}
}

// RestoreReplacing calls its hook once the backup has passed its checks and before the
// keys change, and never for a backup it refuses: what a caller keeps beside the keys
// (a partition's snapshot files) goes only when the keys are about to be replaced.
func TestRestoreReplacingOnlyWhenAccepted(t *testing.T) {
	a, b := coldtest.Open(t, cold.Options{}), coldtest.Open(t, cold.Options{})
	ks := cold.CounterKeys([]string{"post"}, 3)
	save := func(db *cold.DB, id, pos uint64) {
		t.Helper()
		cp := &checkpoint.Checkpoint{Pos: pos, Marks: map[uint32]*delivery.Mark{}}
		if err := checkpoint.SaveCounters(db, "post", 3, []checkpoint.Entry{{ID: id, Counts: []uint64{pos}}}, cp, checkpoint.Journal{}); err != nil {
			t.Fatal(err)
		}
	}
	held := func(id uint64) uint64 {
		t.Helper()
		got := [][]uint64{make([]uint64, 1)}
		if err := checkpoint.Counts(b, "post", 3, []uint64{id}, got); err != nil {
			t.Fatal(err)
		}
		return got[0][0]
	}
	save(a, 5, 9)
	save(b, 7, 20)
	var buf bytes.Buffer
	if err := a.Backup(&buf, ks); err != nil {
		t.Fatal(err)
	}
	backup := buf.Bytes()

	calls := 0
	replacing := func() {
		calls++
		if v := held(7); v != 20 {
			t.Errorf("the keys changed before the hook: id 7 = %d, want 20", v)
		}
	}
	for name, data := range map[string][]byte{
		"truncated":    backup[:len(backup)-3],
		"another part": backup,
	} {
		into := ks
		if name == "another part" {
			into = cold.CounterKeys([]string{"post"}, 4)
		}
		if err := b.RestoreReplacing(bytes.NewReader(data), into, t.TempDir(), replacing); !errors.Is(err, cold.ErrCorrupt) {
			t.Fatalf("%s: restore error %v, want ErrCorrupt", name, err)
		}
	}
	if calls != 0 {
		t.Fatalf("the hook ran %d times for backups refused", calls)
	}
	if err := b.RestoreReplacing(bytes.NewReader(backup), ks, t.TempDir(), replacing); err != nil {
		t.Fatal(err)
	}
	if calls != 1 || held(5) != 9 || held(7) != 0 {
		t.Fatalf("after the restore: %d hook calls, id 5 = %d, id 7 = %d; want 1, 9, 0", calls, held(5), held(7))
	}
}
