package cold

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"slices"
	"testing"

	"github.com/tally-dev/tally/store/internal/keys"
)

// A backup of an older layout is moved by Options.Upgrade before its marks are written;
// a database opened without one, which could not move it, refuses it before anything of
// the keys changes (read as this layout it would be half read).
func TestRestoreOlderLayoutTakesUpgrade(t *testing.T) {
	open := func(u Upgrade) *DB {
		t.Helper()
		db, err := Open(Options{Dir: t.TempDir(), Upgrade: u})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	stage := func(db *DB) []byte {
		t.Helper()
		var v []byte
		if err := db.View(func(txn *Txn) error {
			_, err := txn.Get(keys.Stage(0), func(b []byte) error { v = slices.Clone(b); return nil })
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return v
	}
	src := open(nil)
	if err := src.Update(func(txn *Txn) error { return txn.Set(keys.Stage(0), []byte("src")) }); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := src.Backup(&buf, EventKeys(0)); err != nil {
		t.Fatal(err)
	}
	// The same backup, saying layout 2.
	b := buf.Bytes()
	section := b[len(backupMagic) : len(b)-12]
	section[0] = LayoutLikes
	binary.BigEndian.PutUint32(b[len(b)-4:], crc32.Checksum(section, castagnoli))

	without := open(nil)
	if err := without.Update(func(txn *Txn) error { return txn.Set(keys.Stage(0), []byte("own")) }); err != nil {
		t.Fatal(err)
	}
	if err := without.Restore(bytes.NewReader(b), EventKeys(0), t.TempDir()); err == nil {
		t.Fatal("a backup of layout 2 restored into a database without Options.Upgrade")
	}
	if got := stage(without); string(got) != "own" {
		t.Fatalf("the refused restore changed the stage key to %q", got)
	}

	var events []int
	var from int
	with := open(func(db *DB, ev []int, f int) (int, error) { events, from = ev, f; return 0, nil })
	if err := with.Restore(bytes.NewReader(b), EventKeys(0), t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(events, []int{0}) || from != LayoutLikes || string(stage(with)) != "src" {
		t.Fatalf("restore upgraded partitions %v from layout %d, stage %q; want [0] from 2, %q", events, from, stage(with), "src")
	}
}
