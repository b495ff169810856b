package graph

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/cold/coldtest"
	"github.com/tally-dev/tally/store/internal/keys"
	"github.com/tally-dev/tally/store/stagelog"
)

// The backup formats of store/cold: TLYB3 says its layout, TLYB2 none.
const (
	backupMagic   = "TLYB3"
	backupMagicV2 = "TLYB2"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// layoutKey is where store/cold records the layout a database is in.
func layoutKey() key { return newKey(keys.NSLayout, 7).Bytes([]byte("layout")) }

// backupAs is a backup of part of db in format magic: backupMagicV2 as versions before
// layouts were recorded wrote it (no layout), or backupMagic saying layout.
func backupAs(t testing.TB, db *cold.DB, part cold.Keys, magic string, layout uint64) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := db.Backup(&buf, part); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	body := b[len(backupMagic) : len(b)-12]
	if _, n := binary.Uvarint(body); n > 0 {
		body = body[n:]
	}
	var section []byte
	if magic == backupMagic {
		section = binary.AppendUvarint(section, layout)
	}
	section = append(section, body...)
	out := append([]byte(magic), section...)
	out = binary.BigEndian.AppendUint64(out, uint64(len(section)))
	return binary.BigEndian.AppendUint32(out, crc32.Checksum(section, castagnoli))
}

// oldPartition writes partition p of a new database in the layout before like records:
// random likes into m (users 1 to 3 heavy), a follow of user 2 by user 1, and the
// stage's position pos. migrated moves it to this layout, as the version just before
// layouts were recorded kept it (its backups say no layout either).
func oldPartition(t *testing.T, p int, m *likeModel, r *rand.Rand, users, posts int, pos uint64, migrated bool) *cold.DB {
	t.Helper()
	db := coldtest.Open(t, cold.Options{Upgrade: Upgrade})
	writeOldLikes(t, db, p, m, r, users, posts, 600, 3, 12)
	err := db.Update(func(txn *cold.Txn) error {
		if _, err := Relate(txn, p, Follow, Rel{A: 1, B: 2}, 5); err != nil {
			return err
		}
		return stagelog.Put(txn, p, &stagelog.State{Pos: pos, Log: pos / 10})
	})
	if err != nil {
		t.Fatal(err)
	}
	if migrated {
		if _, err := Migrate(db, 4, func(id uint64) int { return int(id % 4) }); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

// newProcess is the database of a process of this version: migrated at start, with
// partition p's keys of an earlier owner (which a restore replaces) and partition p+1's
// own likes (which it leaves).
func newProcess(t *testing.T, p int) *cold.DB {
	t.Helper()
	db := coldtest.Open(t, cold.Options{Upgrade: Upgrade})
	if _, err := Migrate(db, 4, func(id uint64) int { return int(id % 4) }); err != nil {
		t.Fatal(err)
	}
	err := db.Update(func(txn *cold.Txn) error {
		for _, q := range []int{p, p + 1} {
			l := NewLikes(q, nil)
			if _, err := l.like(txn, 1, 7, 9000, 3); err != nil {
				return err
			}
			if err := l.Flush(txn, 1); err != nil {
				return err
			}
		}
		return stagelog.Put(txn, p, &stagelog.State{Pos: 1})
	})
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// checkRelikes likes again every like of m in partition p, and unlikes and likes again
// one: each like again changes nothing (a counter would count it twice), the unlike and
// its like again change.
func checkRelikes(t *testing.T, db *cold.DB, p int, m *likeModel) {
	t.Helper()
	err := db.Update(func(txn *cold.Txn) error {
		l := NewLikes(p, nil)
		for u, ls := range m.likes {
			for post, ts := range ls {
				if changed, err := l.like(txn, u, post, ts+1, 1<<40); err != nil || changed {
					t.Errorf("user %d's like of post %d again: changed %v, %v; want nothing", u, post, changed, err)
				}
			}
		}
		for u, ls := range m.likes {
			for post, ts := range ls {
				if changed, since, err := l.unlike(txn, u, post, 1<<40+1); err != nil || !changed || since != ts {
					t.Errorf("unlike of user %d's like of post %d: %v since %d, %v; want a change since %d", u, post, changed, since, err, ts)
				}
				if changed, err := l.like(txn, u, post, ts, 1<<40+2); err != nil || !changed {
					t.Errorf("like of post %d after its unlike: %v, %v", post, changed, err)
				}
				return l.Flush(txn, 1<<41)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A partition backed up by a version before like records — and by the version after,
// whose backups say no layout either — restored into a process of this version answers
// as the partition did: every like, list and recount (CountRelations, the audit's) as
// the model says, a like again counts nothing, the follow and the position are there,
// and the other partition's likes are left. (Before, the old layout's keys were loaded
// as they were: liked false, a like again counted twice, a recount of 0.)
func TestRestoreOldLayout(t *testing.T) {
	const p, users, posts = 2, 10, 60
	for _, migrated := range []bool{false, true} {
		r := rand.New(rand.NewPCG(7, 7))
		m := newLikeModel()
		src := oldPartition(t, p, m, r, users, posts, 500, migrated)
		if len(m.likes[1]) <= maxLightLikes || len(m.likes[5]) == 0 {
			t.Fatalf("user 1 has %d likes, user 5 %d: the model wants heavy and light users", len(m.likes[1]), len(m.likes[5]))
		}
		dst := newProcess(t, p)
		if err := dst.Restore(bytes.NewReader(backupAs(t, src, cold.EventKeys(p), backupMagicV2, 0)), cold.EventKeys(p), t.TempDir()); err != nil {
			t.Fatalf("restore (already migrated %v): %v", migrated, err)
		}
		checkLikes(t, dst, p, m, users, posts, r)
		if st, _, err := stagelog.Load(dst, p); err != nil || st.Pos != 500 {
			t.Fatalf("restored position %d, %v; want 500", st.Pos, err)
		}
		if items, _, err := List(dst, p, Follow, true, 1, 10, ""); err != nil || len(items) != 1 || items[0].ID != 2 {
			t.Fatalf("user 1's follows after the restore: %v, %v", items, err)
		}
		if liked, err := Related(dst, p+1, Like, 1, []uint64{7}); err != nil || !liked[0] {
			t.Fatalf("partition %d's like after partition %d's restore: %v, %v", p+1, p, liked, err)
		}
		checkRelikes(t, dst, p, m)
		if t.Failed() {
			t.Fatalf("backup of the version before like records %v", map[bool]string{false: "", true: "(migrated)"}[migrated])
		}
	}
}

// A backup saying a layout newer than this code knows is refused with ErrNewerLayout,
// before anything of the part is changed; so is a database recording one.
func TestRestoreNewerLayout(t *testing.T) {
	const p = 2
	m := newLikeModel()
	src := oldPartition(t, p, m, rand.New(rand.NewPCG(1, 1)), 6, 30, 500, true)
	dst := newProcess(t, p)
	err := dst.Restore(bytes.NewReader(backupAs(t, src, cold.EventKeys(p), backupMagic, cold.Layout+1)), cold.EventKeys(p), t.TempDir())
	if !errors.Is(err, cold.ErrNewerLayout) || !strings.Contains(err.Error(), fmt.Sprintf("layout %d", cold.Layout+1)) {
		t.Fatalf("restore of a backup of layout %d: %v, want ErrNewerLayout naming it", cold.Layout+1, err)
	}
	if st, _, _ := stagelog.Load(dst, p); st.Pos != 1 {
		t.Fatalf("a refused restore changed the part: position %d", st.Pos)
	}
	if liked, err := Related(dst, p, Like, 1, []uint64{7}); err != nil || !liked[0] {
		t.Fatalf("a refused restore changed the part's likes: %v, %v", liked, err)
	}
	// Its own layout restores.
	if err := dst.Restore(bytes.NewReader(backupAs(t, src, cold.EventKeys(p), backupMagic, cold.Layout)), cold.EventKeys(p), t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if err := dst.Update(func(txn *cold.Txn) error {
		return txn.Set(layoutKey(), binary.AppendUvarint(nil, cold.Layout+1))
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := Migrate(dst, 4, func(id uint64) int { return int(id % 4) }); !errors.Is(err, cold.ErrNewerLayout) {
		t.Fatalf("Migrate of a database of layout %d: %v, want ErrNewerLayout", cold.Layout+1, err)
	}
}

// A restore stopped in the middle of moving an old backup to this layout (each of the
// move's commits fails in turn, as a crash would stop it there) leaves the part without
// its position, so the next claim or standby restores it again, and that restore
// answers as the model says.
func TestRestoreUpgradeResumes(t *testing.T) {
	const p, users, posts = 2, 12, 80
	defer func(n int) { maxGroupOps, commitFault = n, nil }(maxGroupOps)
	maxGroupOps = 40
	r := rand.New(rand.NewPCG(5, 5))
	m := newLikeModel()
	backup := backupAs(t, oldPartition(t, p, m, r, users, posts, 500, false), cold.EventKeys(p), backupMagicV2, 0)
	faults := 0
	for fail := 1; ; fail++ {
		dst := newProcess(t, p)
		commits := 0
		commitFault = func() error {
			if commits++; commits == fail {
				return errors.New("injected: the process died here")
			}
			return nil
		}
		err := dst.Restore(bytes.NewReader(backup), cold.EventKeys(p), t.TempDir())
		commitFault = nil
		if err == nil {
			if faults < 5 {
				t.Fatalf("the move committed %d times; the test wants more groups", commits)
			}
			t.Logf("%d commits, each failed once and restored again", faults)
			return
		}
		faults++
		if st, _, err := stagelog.Load(dst, p); err != nil || st.Pos != 0 {
			t.Fatalf("a restore stopped at commit %d left position %d, %v; want none", fail, st.Pos, err)
		}
		if err := dst.Restore(bytes.NewReader(backup), cold.EventKeys(p), t.TempDir()); err != nil {
			t.Fatalf("restore after commit %d failed: %v", fail, err)
		}
		checkLikes(t, dst, p, m, users, posts, r)
		if t.Failed() {
			t.Fatalf("answers differ after commit %d failed and the restore ran again", fail)
		}
	}
}

// TestRestoreLayout2 restores a partition backed up by a process of layout 2 (like
// records before relation states) into a process of this layout: its like records move
// to states as they are restored, every answer is the same, and likes and unlikes go on.
func TestRestoreLayout2(t *testing.T) {
	const p, users, posts = 2, 8, 60
	r := rand.New(rand.NewPCG(4, 4))
	src, m := coldtest.Open(t, cold.Options{Upgrade: Upgrade}), newLikeModel()
	writeLegacyRecords(t, src, p, m, r, users, posts)
	if err := src.Update(func(txn *cold.Txn) error { return stagelog.Put(txn, p, &stagelog.State{Pos: 500}) }); err != nil {
		t.Fatal(err)
	}
	dst := newProcess(t, p)
	if err := dst.Restore(bytes.NewReader(backupAs(t, src, cold.EventKeys(p), backupMagic, cold.LayoutLikes)), cold.EventKeys(p), t.TempDir()); err != nil {
		t.Fatal(err)
	}
	checkLikes(t, dst, p, m, users, posts, r)
	noLegacyRecords(t, dst, p)
	checkRelikes(t, dst, p, m)
	likeAndUnlike(t, dst, p, m, r, users, posts)
	checkLikes(t, dst, p, m, users, posts, r)
}
