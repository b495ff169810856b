package cluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/natstest"
	"github.com/tally-dev/tally/store/checkpoint"
	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/delivery"
	"github.com/tally-dev/tally/store/graph"
)

// backupRig is a NATS server with the streams and state bucket, and processes that own
// counter partition 0 in turn: each has its own node id and Badger.
type backupRig struct {
	t   *testing.T
	js  jetstream.JetStream
	obs jetstream.ObjectStore
	sj  pipeline.Subjects
}

func newBackupRig(t *testing.T) *backupRig {
	t.Helper()
	js, obs, sj := natstest.State(t, 2)
	return &backupRig{t: t, js: js, obs: obs, sj: sj}
}

// proc is one process of the rig: its node id (in its own data directory), its
// database and its view of the backups.
type proc struct {
	owners *Owners
	b      *Backups
	db     *cold.DB
}

// family is the family whose partition 0 the rig's processes back up.
var family = pipeline.DefaultFamilies()[0]

func (r *backupRig) process() *proc {
	t := r.t
	t.Helper()
	dir := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	o, err := Open(t.Context(), r.js, Bucket{Name: r.sj.OwnersBucket()}, dir, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	db, err := cold.Open(cold.Options{Dir: filepath.Join(dir, "state"), Logger: log, Upgrade: graph.Upgrade})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return &proc{owners: o, db: db, b: &Backups{JS: r.js, Obs: r.obs, DB: db, Subjects: r.sj, Log: log, TmpDir: dir}}
}

// piece is counter partition 0 of family, as a process backs it up.
func (n *proc) piece() Piece {
	return Piece{Name: "counters.0", Keys: cold.CounterKeys([]string{family.Name}, 0), Pos: func() ([]uint64, error) {
		cp, err := checkpoint.LoadCheckpoint(n.db, family.Name, 0)
		return []uint64{cp.Pos}, err
	}}
}

// take takes partition 0's lease for n, as a new owner does once the last one's expired.
func (r *backupRig) take(n *proc) *Lease {
	r.t.Helper()
	_ = r.kv().Delete(r.t.Context(), "counters.0") // the last owner's lease expired
	l, err := n.owners.Take(r.t.Context(), "counters.0")
	if err != nil {
		r.t.Fatal(err)
	}
	return l
}

// kv is the ownership bucket, as another process (or an operator) sees it.
func (r *backupRig) kv() jetstream.KeyValue {
	r.t.Helper()
	kv, err := r.js.KeyValue(r.t.Context(), r.sj.OwnersBucket())
	if err != nil {
		r.t.Fatal(err)
	}
	return kv
}

// own takes partition 0 for n, claims it, applies it up to pos and backs it up.
func (r *backupRig) own(n *proc, pos uint64) *Lease {
	r.t.Helper()
	l := r.take(n)
	if _, err := r.claim(n, l); err != nil {
		r.t.Fatal(err)
	}
	r.checkpoint(n, pos)
	if err := r.backup(n, l); err != nil {
		r.t.Fatal(err)
	}
	return l
}

func (r *backupRig) claim(n *proc, l *Lease) (string, error) {
	return n.b.Claim(r.t.Context(), n.piece(), l)
}

func (r *backupRig) backup(n *proc, l *Lease) error {
	_, _, err := n.b.Store(r.t.Context(), n.piece(), l)
	return err
}

// checkpoint stores partition 0 of the first family as applied up to pos.
func (r *backupRig) checkpoint(n *proc, pos uint64) {
	r.t.Helper()
	fam := family
	counts := make([]uint64, len(fam.Fields))
	counts[0] = pos
	cp := &checkpoint.Checkpoint{Pos: pos, Marks: map[uint32]*delivery.Mark{}}
	if err := checkpoint.SaveCounters(n.db, fam.Name, 0, []checkpoint.Entry{{ID: 1, Counts: counts}}, cp, checkpoint.Journal{}); err != nil {
		r.t.Fatal(err)
	}
}

func (r *backupRig) pos(n *proc) uint64 {
	r.t.Helper()
	cp, err := checkpoint.LoadCheckpoint(n.db, family.Name, 0)
	if err != nil {
		r.t.Fatal(err)
	}
	return cp.Pos
}

func (r *backupRig) pointer(name string) (pointer, uint64) {
	r.t.Helper()
	st, err := r.js.Stream(r.t.Context(), r.sj.LogStream())
	if err != nil {
		r.t.Fatal(err)
	}
	m, err := st.GetLastMsgForSubject(r.t.Context(), r.sj.BackupPointer(name))
	if err != nil {
		r.t.Fatal(err)
	}
	var p pointer
	if err := json.Unmarshal(m.Data, &p); err != nil {
		r.t.Fatal(err)
	}
	return p, m.Sequence
}

// object is the object the pointer of piece name names.
func (r *backupRig) object(name string) string {
	p, _ := r.pointer(name)
	return p.Object
}

// read reads object name whole, and its info.
func (r *backupRig) read(name string) ([]byte, *jetstream.ObjectInfo) {
	r.t.Helper()
	data, err := r.obs.GetBytes(r.t.Context(), name)
	if err != nil {
		r.t.Fatal(err)
	}
	info, err := r.obs.GetInfo(r.t.Context(), name)
	if err != nil {
		r.t.Fatal(err)
	}
	return data, info
}

// damage replaces object name's bytes by others of the same length, keeping its metadata
// (the lease it was taken under): a backup that passes every check but its own.
func (r *backupRig) damage(name string) {
	r.t.Helper()
	ctx := r.t.Context()
	data, info := r.read(name)
	data[len(data)/2] ^= 0xff
	if _, err := r.obs.PutBytes(ctx, name, data); err != nil { // drops the metadata
		r.t.Fatal(err)
	}
	if err := r.obs.UpdateMeta(ctx, name, info.ObjectMeta); err != nil {
		r.t.Fatal(err)
	}
}

// damageChunks rewrites object name's chunks with one byte changed, leaving its info (its
// digest) as it was: what a backup stored with its chunks out of order read as (see
// TestPutObjectNotReordered), refused by nats.go's digest check.
func (r *backupRig) damageChunks(name string) {
	r.t.Helper()
	ctx := r.t.Context()
	data, info := r.read(name)
	bucket := r.sj.StateBucket()
	st, err := r.js.Stream(ctx, "OBJ_"+bucket)
	if err != nil {
		r.t.Fatal(err)
	}
	subj := "$O." + bucket + ".C." + info.NUID
	if err := st.Purge(ctx, jetstream.WithPurgeSubject(subj)); err != nil {
		r.t.Fatal(err)
	}
	data[len(data)/2] ^= 0xff
	if _, err := r.js.Publish(ctx, subj, data); err != nil {
		r.t.Fatal(err)
	}
	if _, err := r.obs.GetBytes(ctx, name); !errors.Is(err, jetstream.ErrDigestMismatch) {
		r.t.Fatalf("the damaged object reads with %v, want ErrDigestMismatch", err)
	}
}

// A backup that cannot be read (TestChaosCluster, seed 7: a backup stored with its chunks
// out of order before putObject stopped that) left its partition to its last owner
// alone, and for good: the last owner, back, took its local state and found the piece
// unchanged since that backup, so it never stored another, and every other process read
// the whole object again at each start only to refuse it. The first claim to find it
// damaged now records it in the pointer: the next refuse it unread, and the last owner's
// next backup replaces it, changed or not.
func TestDamagedBackupReplaced(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(r *backupRig, object string)
		is     error
	}{
		{"digest", (*backupRig).damageChunks, jetstream.ErrDigestMismatch},
		{"checksum", (*backupRig).damage, cold.ErrCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newBackupRig(t)
			a, b, c := r.process(), r.process(), r.process()
			r.own(a, 10)
			damaged, _ := r.pointer("counters.0")
			tc.damage(r, damaged.Object)

			if from, err := r.claim(b, r.take(b)); !errors.Is(err, ErrDamagedBackup) || !errors.Is(err, tc.is) {
				t.Fatalf("b's claim of a damaged backup: %q %v, want ErrDamagedBackup and %v", from, err, tc.is)
			}
			if p, _ := r.pointer("counters.0"); !p.Damaged || p.Object != damaged.Object || p.Owner != a.owners.ID() {
				t.Fatalf("after b's claim the pointer is %+v, want %s marked damaged, a its last owner", p, damaged.Object)
			}
			// Gone, it would be refused as stale if c read it.
			if err := r.obs.Delete(t.Context(), damaged.Object); err != nil {
				t.Fatal(err)
			}
			if from, err := r.claim(c, r.take(c)); !errors.Is(err, ErrDamagedBackup) || errors.Is(err, ErrStaleBackup) {
				t.Fatalf("c's claim of a backup marked damaged: %q %v, want ErrDamagedBackup without reading it", from, err)
			}
			if _, _, err := c.b.Prime(t.Context(), c.piece(), c.owners.ID()); !errors.Is(err, ErrDamagedBackup) {
				t.Fatalf("c's prime from a backup marked damaged: %v, want ErrDamagedBackup", err)
			}

			la := r.take(a)
			if from, err := r.claim(a, la); err != nil || from != "local" {
				t.Fatalf("the last owner's claim: %q %v, want its local state", from, err)
			}
			size, covered, err := a.b.Store(t.Context(), a.piece(), la)
			if err != nil || size == 0 || !slices.Equal(covered, []uint64{10}) {
				t.Fatalf("the last owner's backup of its unchanged piece: %d bytes covering %v, %v; want a new backup at 10", size, covered, err)
			}
			p, _ := r.pointer("counters.0")
			if p.Damaged || p.Object == damaged.Object || p.Gen != damaged.Gen+1 {
				t.Fatalf("after the last owner's backup the pointer is %+v, want a new backup after %+v", p, damaged)
			}
			if from, err := r.claim(b, r.take(b)); err != nil || from != "backup" || r.pos(b) != 10 {
				t.Fatalf("b's claim of the new backup: %q %v, at %d; want it restored at 10", from, err, r.pos(b))
			}
		})
	}
}

// A standby primed from a backup that cannot be read marks it, though it holds no lease,
// and the owner's next backup of its unchanged, idle partition replaces it: the standby
// then primes. Before, the owner skipped every backup of the idle partition, and its
// standby read the damaged object again at every try, for good.
func TestDamagedBackupFoundByAStandby(t *testing.T) {
	r := newBackupRig(t)
	a, c := r.process(), r.process()
	la := r.own(a, 10)
	damaged, _ := r.pointer("counters.0")
	r.damageChunks(damaged.Object)
	if _, _, err := c.b.Prime(t.Context(), c.piece(), c.owners.ID()); !errors.Is(err, ErrDamagedBackup) {
		t.Fatalf("a prime from a damaged backup: %v, want ErrDamagedBackup", err)
	}
	if p, _ := r.pointer("counters.0"); !p.Damaged || !p.heldBy(la) || p.Object != damaged.Object {
		t.Fatalf("after the prime the pointer is %+v, want %s marked damaged, a's lease kept", p, damaged.Object)
	}
	if size, covered, err := a.b.Store(t.Context(), a.piece(), la); err != nil || size == 0 || !slices.Equal(covered, []uint64{10}) {
		t.Fatalf("the owner's backup of its unchanged piece: %d bytes covering %v, %v; want a new backup at 10", size, covered, err)
	}
	if from, _, err := c.b.Prime(t.Context(), c.piece(), c.owners.ID()); err != nil || from != "backup" || r.pos(c) != 10 {
		t.Fatalf("the standby's prime of the new backup: %q %v, at %d", from, err, r.pos(c))
	}
}

// An old owner that was paused after its lease check writes its backup after the new
// owner claimed the partition, and again after the new owner's backup: neither becomes
// current, and the next owner restores the new owner's backup. (Before pointers the old
// owner's backup replaced the new one's under the same name: the next owner restored it
// and lost what the new owner had applied and purged since.)
func TestBackupFenced(t *testing.T) {
	r := newBackupRig(t)
	a, b, c := r.process(), r.process(), r.process()

	la := r.take(a)
	if from, err := r.claim(a, la); err != nil || from != "local" {
		t.Fatalf("first claim: %q %v", from, err)
	}
	r.checkpoint(a, 10)
	if err := r.backup(a, la); err != nil {
		t.Fatal(err)
	}

	// a pauses after its lease check; its lease expires and b takes the partition over.
	lb := r.take(b)
	if from, err := r.claim(b, lb); err != nil || from != "backup" || r.pos(b) != 10 {
		t.Fatalf("b's claim: %q %v, at %d, want a's backup at 10", from, err, r.pos(b))
	}
	r.checkpoint(a, 15)
	if !la.Valid() {
		t.Fatal("the old owner's lease must still look held to it")
	}
	if err := r.backup(a, la); !errors.Is(err, ErrSuperseded) {
		t.Fatalf("the old owner's backup after the new owner's claim: %v, want ErrSuperseded", err)
	}
	r.checkpoint(b, 20)
	if err := r.backup(b, lb); err != nil {
		t.Fatal(err)
	}
	r.checkpoint(a, 25)
	if err := r.backup(a, la); !errors.Is(err, ErrSuperseded) {
		t.Fatalf("the old owner's backup after the new owner's: %v, want ErrSuperseded", err)
	}
	if p, _ := r.pointer("counters.0"); p.Owner != b.owners.ID() || p.Lease != lb.Acquired() || p.Taken != lb.Token() {
		t.Fatalf("pointer %+v, want b's backup (lease %s)", p, lb.Token())
	}

	// a is killed between storing a backup and writing the pointer: the next claim sweeps it.
	if _, err := r.obs.PutString(t.Context(), "counters.0"+"."+la.Token()+".killed", "x"); err != nil {
		t.Fatal(err)
	}

	// b dies; c takes over from b's backup.
	lc := r.take(c)
	if from, err := r.claim(c, lc); err != nil || from != "backup" {
		t.Fatalf("c's claim: %q %v", from, err)
	}
	if got := r.pos(c); got != 20 {
		t.Fatalf("c restored a backup at %d, want b's at 20", got)
	}
	// Only the current backup is kept: the superseded ones were dropped or swept.
	objs, err := r.obs.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := r.pointer("counters.0"); len(objs) != 1 || objs[0].Name != p.Object {
		var names []string
		for _, o := range objs {
			names = append(names, o.Name)
		}
		t.Fatalf("objects %v, want only the current %s", names, p.Object)
	}
}

// A restore follows the pointer and refuses a backup that is gone or older than the
// pointer says, rather than starting from it or from nothing.
func TestRestoreRefusesStale(t *testing.T) {
	r := newBackupRig(t)
	a, b := r.process(), r.process()
	r.own(a, 10)
	good, _ := r.pointer("counters.0")
	for _, tc := range []struct {
		what string
		edit func(p *pointer)
	}{
		{"older than the pointer says", func(p *pointer) { p.Pos[0] = 11 }},
		{"taken under another lease", func(p *pointer) { p.Taken = "other.1" }},
		{"gone", func(p *pointer) { p.Object += ".gone" }},
	} {
		p, seq := r.pointer("counters.0")
		bad := good
		bad.Pos = append([]uint64(nil), good.Pos...)
		bad.Owner, bad.Lease = a.owners.ID(), p.Lease
		tc.edit(&bad)
		data, _ := json.Marshal(bad)
		if _, err := r.js.Publish(t.Context(), r.sj.BackupPointer("counters.0"), data, jetstream.WithExpectLastSequencePerSubject(seq)); err != nil {
			t.Fatal(err)
		}
		lb := r.take(b)
		if from, err := r.claim(b, lb); !errors.Is(err, ErrStaleBackup) {
			t.Fatalf("restore of a backup %s: %q %v, want ErrStaleBackup", tc.what, from, err)
		}
	}
	// The pointer kept a as the last owner: with a good pointer, b restores.
	p, seq := r.pointer("counters.0")
	good.Lease = p.Lease
	data, _ := json.Marshal(good)
	if _, err := r.js.Publish(t.Context(), r.sj.BackupPointer("counters.0"), data, jetstream.WithExpectLastSequencePerSubject(seq)); err != nil {
		t.Fatal(err)
	}
	lb := r.take(b)
	if from, err := r.claim(b, lb); err != nil || from != "backup" || r.pos(b) != 10 {
		t.Fatalf("restore of the good backup: %q %v at %d", from, err, r.pos(b))
	}
}

// Lease revisions start over in an ownership bucket deleted and made again: the pointer
// compares them only within one bucket (its epoch), so the next owner still claims the
// partition and an owner of the old bucket still cannot make its backup current.
func TestBackupPointerBucketRemade(t *testing.T) {
	r := newBackupRig(t)
	a := r.process()
	for range 5 { // revisions the new bucket will not reach
		if _, err := r.kv().Put(t.Context(), "members.x", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	la := r.own(a, 10)
	if err := r.js.DeleteKeyValue(t.Context(), r.sj.OwnersBucket()); err != nil {
		t.Fatal(err)
	}
	b := r.process()
	lb := r.take(b)
	if lb.Acquired() >= la.Acquired() {
		t.Fatalf("the new bucket's revision %d is not below the old one's %d", lb.Acquired(), la.Acquired())
	}
	if from, err := r.claim(b, lb); err != nil || from != "backup" || r.pos(b) != 10 {
		t.Fatalf("claim in a new bucket: %q %v at %d", from, err, r.pos(b))
	}
	if err := r.backup(a, la); !errors.Is(err, ErrSuperseded) {
		t.Fatalf("backup under the old bucket's lease: %v, want ErrSuperseded", err)
	}
}

// A prefix backed up before pointers existed (the last owner in object owner.<name>, the
// backup under name itself) is taken over from that backup, and the pointer replaces the
// owner record.
func TestClaimLegacyBackup(t *testing.T) {
	r := newBackupRig(t)
	a, b := r.process(), r.process()
	r.checkpoint(a, 10)
	var buf bytes.Buffer
	if err := a.db.Backup(&buf, a.piece().Keys); err != nil {
		t.Fatal(err)
	}
	if _, err := r.obs.PutBytes(t.Context(), "counters.0", buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	if _, err := r.obs.PutString(t.Context(), legacyOwner("counters.0"), a.owners.ID()); err != nil {
		t.Fatal(err)
	}
	lb := r.take(b)
	if from, err := r.claim(b, lb); err != nil || from != "backup" || r.pos(b) != 10 {
		t.Fatalf("claim of a legacy backup: %q %v at %d", from, err, r.pos(b))
	}
	if p, _ := r.pointer("counters.0"); p.Owner != b.owners.ID() || p.Object != "counters.0" {
		t.Fatalf("pointer after a legacy claim: %+v", p)
	}
	if _, err := r.obs.GetInfo(t.Context(), legacyOwner("counters.0")); !errors.Is(err, jetstream.ErrObjectNotFound) {
		t.Fatalf("the legacy owner record is left: %v", err)
	}
	r.checkpoint(b, 20)
	if err := r.backup(b, lb); err != nil {
		t.Fatal(err)
	}
	if _, err := r.obs.GetInfo(t.Context(), "counters.0"); !errors.Is(err, jetstream.ErrObjectNotFound) {
		t.Fatalf("the legacy backup is left once another is current: %v", err)
	}
}

// A piece still at the positions of its current backup is not stored again: not by the
// owner that stored it, nor by the next owner, which took the state over as that backup
// has it — and the owner after restores that backup, as current as ever. The first
// copy of a partition whose state has moved on is stored as before. (Every backup period
// stored every id of an idle partition again: with 10 M ids a process, the backups took
// longer than the period and never ended, and a failover's takeovers, standbys and
// queries waited behind them.)
func TestBackupUnchangedNotStoredAgain(t *testing.T) {
	r := newBackupRig(t)
	a, b, c := r.process(), r.process(), r.process()
	la := r.own(a, 10)
	first, seq := r.pointer("counters.0")
	objects := func() int {
		t.Helper()
		objs, err := r.obs.List(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return len(objs)
	}
	unchanged := func(who string, n *proc, l *Lease) {
		t.Helper()
		size, covered, err := n.b.Store(t.Context(), n.piece(), l)
		if err != nil {
			t.Fatal(err)
		}
		if size != 0 || covered != nil {
			t.Errorf("%s's backup of an unchanged piece stored %d bytes covering %v, want nothing", who, size, covered)
		}
		if p, s := r.pointer("counters.0"); s != seq || p.Object != first.Object || p.Gen != first.Gen {
			t.Errorf("%s's backup of an unchanged piece: pointer %+v (sequence %d), want %+v (%d)", who, p, s, first, seq)
		}
		if got := objects(); got != 1 {
			t.Errorf("%s's backup of an unchanged piece: %d objects, want the current one only", who, got)
		}
	}
	unchanged("the owner", a, la)

	lb := r.take(b)
	if from, err := r.claim(b, lb); err != nil || from != "backup" || r.pos(b) != 10 {
		t.Fatalf("b's claim: %q %v, at %d, want a's backup at 10", from, err, r.pos(b))
	}
	first, seq = r.pointer("counters.0") // the claim wrote b in
	unchanged("the next owner", b, lb)

	lc := r.take(c)
	if from, err := r.claim(c, lc); err != nil || from != "backup" || r.pos(c) != 10 {
		t.Fatalf("c's claim: %q %v, at %d, want the backup at 10", from, err, r.pos(c))
	}
	r.checkpoint(c, 12)
	size, covered, err := c.b.Store(t.Context(), c.piece(), lc)
	if err != nil || size == 0 || len(covered) != 1 || covered[0] != 12 {
		t.Fatalf("a backup of a piece moved on: %d bytes covering %v, %v; want it stored at 12", size, covered, err)
	}
	if p, _ := r.pointer("counters.0"); p.Gen != first.Gen+1 || p.Object == first.Object {
		t.Fatalf("a backup of a piece moved on: pointer %+v, want a new backup after %+v", p, first)
	}
}

// A standby's copy found warm may be behind by the time its process claims the
// partition: the last owner stored another backup in between (an old owner, before the
// claim fenced it). The claim then restores, and first has whatever keeps the copy up
// stop (Piece.Unwarm): a standby's counter workers taken on as the owner's after a
// restore under them held counts in RAM that the restored marks did not, and applied
// those deltas again (follower counts one or two high in TestNATSClusterServerLoss).
func TestClaimStopsAStaleCopyBeforeRestoring(t *testing.T) {
	for _, tc := range []struct {
		name     string
		copyPos  uint64
		from     string
		unwarmed bool
	}{
		{"copy reflects the backup", 10, "standby", false},
		{"copy behind the backup", 5, "backup", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newBackupRig(t)
			a, b := r.process(), r.process()
			r.own(a, 10) // the last owner's backup, at 10
			r.checkpoint(b, tc.copyPos)
			l := r.take(b)
			pc := b.piece()
			pc.Warm = true
			var seen []uint64 // the copy's position when Unwarm ran
			pc.Unwarm = func() { seen = append(seen, r.pos(b)) }
			from, err := b.b.Claim(t.Context(), pc, l)
			if err != nil {
				t.Fatal(err)
			}
			if from != tc.from {
				t.Fatalf("claimed from %q, want %q", from, tc.from)
			}
			if tc.unwarmed && (len(seen) != 1 || seen[0] != tc.copyPos) {
				t.Fatalf("Unwarm saw the copy at %v, want once at %d, before the restore", seen, tc.copyPos)
			}
			if !tc.unwarmed && len(seen) != 0 {
				t.Fatalf("Unwarm called (%v) for a copy taken as it is", seen)
			}
			if got := r.pos(b); got != 10 {
				t.Fatalf("after the claim the copy is at %d, want 10", got)
			}
		})
	}
}

// What is kept beside a piece's local state (a counter partition's snapshot files) goes
// before a claim or a prime replaces that state, and only then: Replacing sees the old
// state. Before, the node dropped the files after the claim, and a claim whose events
// piece failed after its counters were restored (its lease lost meanwhile) returned
// without it: the next start here took the restored keys as its own ("local") and loaded
// the old files with them (46 such files in a 100-cycle chaos run).
func TestReplacingBeforeTheStateIs(t *testing.T) {
	claim := func(r *backupRig, n *proc, warm bool) (string, []uint64) {
		t.Helper()
		l := r.take(n)
		pc := n.piece()
		pc.Warm = warm
		var seen []uint64
		pc.Replacing = func() { seen = append(seen, r.pos(n)) }
		from, err := n.b.Claim(t.Context(), pc, l)
		if err != nil {
			t.Fatal(err)
		}
		return from, seen
	}
	prime := func(r *backupRig, n *proc) (string, []uint64) {
		t.Helper()
		pc := n.piece()
		var seen []uint64
		pc.Replacing = func() { seen = append(seen, r.pos(n)) }
		from, _, err := n.b.Prime(t.Context(), pc, n.owners.ID())
		if err != nil {
			t.Fatal(err)
		}
		return from, seen
	}
	for _, tc := range []struct {
		name string
		run  func(r *backupRig, a, b *proc) (string, []uint64)
		from string
		seen []uint64 // b's position when Replacing ran
	}{
		{"claim from a backup", func(r *backupRig, a, b *proc) (string, []uint64) {
			r.own(a, 10)
			r.checkpoint(b, 5)
			return claim(r, b, false)
		}, "backup", []uint64{5}},
		{"claim never backed up", func(r *backupRig, a, b *proc) (string, []uint64) {
			if _, err := r.claim(a, r.take(a)); err != nil { // owned, no backup stored
				t.Fatal(err)
			}
			r.checkpoint(b, 5)
			return claim(r, b, false)
		}, "empty", []uint64{5}},
		{"claim of the last owner", func(r *backupRig, a, b *proc) (string, []uint64) {
			r.own(a, 10)
			r.checkpoint(a, 12)
			return claim(r, a, false)
		}, "local", nil},
		{"claim of a warm standby", func(r *backupRig, a, b *proc) (string, []uint64) {
			r.own(a, 10)
			r.checkpoint(b, 10)
			return claim(r, b, true)
		}, "standby", nil},
		{"prime from a backup", func(r *backupRig, a, b *proc) (string, []uint64) {
			r.own(a, 10)
			r.checkpoint(b, 5)
			return prime(r, b)
		}, "backup", []uint64{5}},
		{"prime from a damaged backup", func(r *backupRig, a, b *proc) (string, []uint64) {
			r.own(a, 10)
			r.checkpoint(b, 5)
			r.damage(r.object("counters.0"))
			pc := b.piece()
			var seen []uint64
			pc.Replacing = func() { seen = append(seen, r.pos(b)) }
			if _, _, err := b.b.Prime(t.Context(), pc, b.owners.ID()); !errors.Is(err, cold.ErrCorrupt) {
				t.Fatalf("prime from a damaged backup: %v, want ErrCorrupt", err)
			}
			if got := r.pos(b); got != 5 {
				t.Fatalf("a refused backup changed the state: at %d, want 5", got)
			}
			return "refused", seen
		}, "refused", nil},
		{"prime of a copy that reflects the backup", func(r *backupRig, a, b *proc) (string, []uint64) {
			r.own(a, 10)
			r.checkpoint(b, 11)
			return prime(r, b)
		}, "local", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newBackupRig(t)
			a, b := r.process(), r.process()
			from, seen := tc.run(r, a, b)
			if from != tc.from {
				t.Fatalf("from %q, want %q", from, tc.from)
			}
			if !slices.Equal(seen, tc.seen) {
				t.Fatalf("Replacing saw the state at %v, want %v", seen, tc.seen)
			}
		})
	}
}
