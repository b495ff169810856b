package cluster

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/graph"
	"github.com/tally-dev/tally/store/stagelog"
)

// layout1 is testdata/layout1/events.3.tlyb: event partition 3 backed up by Tally at
// commit eae36bc, before like records (see testdata/layout1/gen.go). Its likes: user u
// (1 to 40) likes u posts, the i-th post 1000+(7u+13i)%97 at time 1.7e12 ms + i s + u
// ms, so users 33 to 40 have more likes than a like record holds. User 1 follows user 2.
// Its stage is at log record 7.
const layout1Part = 3

func layout1Likes() map[uint64]map[uint64]int64 {
	likes := map[uint64]map[uint64]int64{}
	for u := uint64(1); u <= 40; u++ {
		likes[u] = map[uint64]int64{}
		for i := uint64(0); i < u; i++ {
			likes[u][1000+(7*u+13*i)%97] = int64(1_700_000_000_000 + i*1000 + u)
		}
	}
	return likes
}

// eventPiece is event partition p as a process backs it up (as stages/node's is).
func (n *proc) eventPiece(p int) Piece {
	return Piece{Name: "events." + strconv.Itoa(p), Keys: cold.EventKeys(p), Pos: func() ([]uint64, error) {
		st, _, err := stagelog.Load(n.db, p)
		return []uint64{st.Log}, err
	}}
}

// storeOld makes data, a backup written by an older version, the current backup of pc
// under l, as that version stored it: no layout in its metadata.
func (r *backupRig) storeOld(n *proc, pc Piece, l *Lease, data []byte, pos []uint64) {
	r.t.Helper()
	obj := fmt.Sprintf("%s.%s.old", pc.Name, l.Token())
	if _, err := r.obs.Put(r.t.Context(), jetstream.ObjectMeta{Name: obj, Metadata: map[string]string{"owner": l.ID(), "lease": l.Token(), "pos": formatPos(pos)}}, bytes.NewReader(data)); err != nil {
		r.t.Fatal(err)
	}
	if err := n.b.setPointer(r.t.Context(), pc.Name, func(cur pointer) (pointer, error) {
		return pointer{Object: obj, Taken: l.Token(), Pos: pos, Owner: l.ID(), Lease: l.Acquired(), Epoch: l.Epoch(), Gen: cur.Gen + 1}, nil
	}); err != nil {
		r.t.Fatal(err)
	}
}

// checkLayout1 compares partition 3 of db, restored from layout1, with its likes: every
// user's liked of every post, each post's likers newest first, the recount the audit
// makes (graph.CountRelations) against the likes counted, a like again changing
// nothing (a counter would count it twice), the follow and the stage's position.
func checkLayout1(t *testing.T, db *cold.DB, from string) {
	t.Helper()
	const p = layout1Part
	likes := layout1Likes()
	posts := make([]uint64, 97)
	for i := range posts {
		posts[i] = uint64(1000 + i)
	}
	likers := map[uint64][]graph.Item{}
	for u, ls := range likes {
		liked, err := graph.Related(db, p, graph.Like, u, posts)
		if err != nil {
			t.Fatal(err)
		}
		for i, post := range posts {
			ts, want := ls[post]
			if liked[i] != want {
				t.Fatalf("restored from %s: user %d liked post %d: %v, want %v", from, u, post, liked[i], want)
			}
			if want {
				likers[post] = append(likers[post], graph.Item{ID: u, TS: ts})
			}
		}
	}
	rc, err := graph.CountRelations(db, []int{p}, posts, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, post := range posts {
		if rc.Likes[i] != uint64(len(likers[post])) {
			t.Fatalf("restored from %s: post %d recounted %d likes, counted %d", from, post, rc.Likes[i], len(likers[post]))
		}
		want := likers[post]
		slices.SortFunc(want, func(a, b graph.Item) int {
			if a.TS != b.TS {
				return int(b.TS - a.TS)
			}
			return int(a.ID) - int(b.ID)
		})
		got, _, err := graph.List(db, p, graph.Like, false, post, 100, "")
		if err != nil {
			t.Fatal(err)
		}
		if !slices.EqualFunc(got, want, func(a, b graph.Item) bool { return a.ID == b.ID && a.TS == b.TS }) {
			t.Fatalf("restored from %s: likers of post %d %v, want %v", from, post, got, want)
		}
	}
	err = db.Update(func(txn *cold.Txn) error {
		for u, ls := range likes {
			for post, ts := range ls {
				if changed, err := graph.Relate(txn, p, graph.Like, graph.Rel{A: u, B: post}, ts+5); err != nil || changed {
					return fmt.Errorf("user %d's like of post %d again: changed %v, %v; want nothing", u, post, changed, err)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("restored from %s: %v", from, err)
	}
	if items, _, err := graph.List(db, p, graph.Follow, true, 1, 10, ""); err != nil || len(items) != 1 || items[0].ID != 2 {
		t.Fatalf("restored from %s: user 1 follows %v, %v; want user 2", from, items, err)
	}
	if st, _, err := stagelog.Load(db, p); err != nil || st.Log != 7 || st.Pos != 5000 {
		t.Fatalf("restored from %s: stage at record %d, event %d, %v; want 7, 5000", from, st.Log, st.Pos, err)
	}
}

// A rolling upgrade: partition 3's current backup was stored by a process of the version
// before like records. A process of this version that takes the partition over from it,
// and one that primes a standby from it, answer as the partition did (see
// checkLayout1); before, the old layout's keys were loaded as they were — liked false, a
// like again counted twice, a recount of 0 that a repair would have zeroed the counts to.
// The new owner's backups say their layout.
func TestRestoreOldLayoutBackup(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "testdata", "layout1", "events.3.tlyb"))
	if err != nil {
		t.Fatal(err)
	}
	r := newBackupRig(t)
	old, b, c := r.process(), r.process(), r.process()
	lo := r.take(old)
	if _, err := old.b.Claim(t.Context(), old.eventPiece(layout1Part), lo); err != nil {
		t.Fatal(err)
	}
	r.storeOld(old, old.eventPiece(layout1Part), lo, data, []uint64{7})

	// c primes a standby from it while the old owner runs.
	if from, _, err := c.b.Prime(t.Context(), c.eventPiece(layout1Part), c.owners.ID()); err != nil || from != "backup" {
		t.Fatalf("standby prime: %q %v", from, err)
	}
	checkLayout1(t, c.db, "a standby's prime")

	// The old owner dies; b, of this version, takes the partition over.
	lb := r.take(b)
	if from, err := b.b.Claim(t.Context(), b.eventPiece(layout1Part), lb); err != nil || from != "backup" {
		t.Fatalf("takeover: %q %v", from, err)
	}
	checkLayout1(t, b.db, "a takeover")
	if _, _, err := b.b.Store(t.Context(), b.eventPiece(layout1Part), lb); err != nil {
		t.Fatal(err)
	}
	p, _ := r.pointer("events.3")
	info, err := r.obs.GetInfo(t.Context(), p.Object)
	if err != nil || info.Metadata["layout"] != strconv.Itoa(cold.Layout) {
		t.Fatalf("the new owner's backup %s says layout %q, %v; want %d", p.Object, info.Metadata["layout"], err, cold.Layout)
	}
}

// A backup of a layout newer than this process knows — as a process of the next version
// would store it, or with only its header saying so — is refused with ErrNewerLayout,
// by a takeover and by a standby, and the state here is left as it was.
func TestRestoreRefusesNewerLayout(t *testing.T) {
	r := newBackupRig(t)
	a, b := r.process(), r.process()
	la := r.own(a, 10)
	var buf bytes.Buffer
	if err := a.db.Backup(&buf, a.piece().Keys); err != nil {
		t.Fatal(err)
	}
	r.checkpoint(b, 3)
	for _, tc := range []struct {
		what string
		meta bool // its metadata says the layout, as this version's Store writes
	}{{"saying so in its metadata and header", true}, {"saying so in its header only", false}} {
		data := newerLayout(t, buf.Bytes())
		obj := "counters.0." + la.Token() + ".next"
		meta := map[string]string{"owner": la.ID(), "lease": la.Token(), "pos": "10"}
		if tc.meta {
			meta["layout"] = strconv.Itoa(cold.Layout + 1)
		}
		if _, err := r.obs.Put(t.Context(), jetstream.ObjectMeta{Name: obj, Metadata: meta}, bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
		if err := a.b.setPointer(t.Context(), "counters.0", func(cur pointer) (pointer, error) {
			cur.Object, cur.Taken = obj, la.Token()
			return cur, nil
		}); err != nil {
			t.Fatal(err)
		}
		if from, _, err := b.b.Prime(t.Context(), b.piece(), b.owners.ID()); !errors.Is(err, cold.ErrNewerLayout) {
			t.Fatalf("standby prime from a backup %s: %q %v, want ErrNewerLayout", tc.what, from, err)
		}
		lb := r.take(b)
		from, err := r.claim(b, lb)
		if !errors.Is(err, cold.ErrNewerLayout) || !strings.Contains(err.Error(), "layout "+strconv.Itoa(cold.Layout+1)) {
			t.Fatalf("takeover from a backup %s: %q %v, want ErrNewerLayout naming the layout", tc.what, from, err)
		}
		if got := r.pos(b); got != 3 {
			t.Fatalf("a refused backup changed the state here: at %d, want 3", got)
		}
		t.Logf("%s: %v", tc.what, err)
		la = r.take(a) // a is back, and owns it as its last owner
		if from, err := r.claim(a, la); err != nil || from != "local" {
			t.Fatalf("the last owner's claim: %q %v", from, err)
		}
	}
}

// newerLayout is backup, of this layout, saying the next one in its header.
func newerLayout(t *testing.T, backup []byte) []byte {
	t.Helper()
	data := bytes.Clone(backup)
	const head = len("TLYB3")
	if string(data[:head]) != "TLYB3" || data[head] != byte(cold.Layout) {
		t.Fatalf("backup header %q: not one layout byte after TLYB3", data[:head+1])
	}
	data[head]++
	section := data[head : len(data)-12]
	binary.BigEndian.PutUint32(data[len(data)-4:], crc32.Checksum(section, crc32.MakeTable(crc32.Castagnoli)))
	return data
}
