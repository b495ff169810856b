package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/store/cold"
)

// A state backup is an object of its own, under a name no other write uses, and becomes
// current only through its pointer: a record in the log stream (Subjects.BackupPointer),
// which never ages out, written by compare-and-set on the subject's last sequence. A new
// owner first writes its lease revision into the pointer, then restores the backup the
// pointer names, then writes itself in as the last owner; an owner writes a pointer only
// while the pointer still holds its own lease, and purges what a backup covers only once
// the backup is current. So an old
// owner that was paused after its lease check, and writes a backup after the new owner
// claimed the partition, neither makes it current nor purges anything.

// Piece is state that moves between processes as one: one partition's event stage's
// or its counters' (every family of them).
type Piece struct {
	Name string // of its pointer and, with a unique suffix, of its backups
	Keys cold.Keys
	// pos reads the positions its stored state reflects: the event stage's last log
	// record, or each family's last delta applied. Read before a backup, they are covered by it.
	Pos func() ([]uint64, error)
	// Warm says the local state is a standby's copy, kept up from the last owner's
	// backup and streams (stages/node's standby.go): a claim takes it as it is when it
	// reflects at least the positions of the backup it would restore.
	Warm bool
	// Unwarm, with Warm, is called when the claim finds the local copy behind the backup
	// (the last owner stored another since the copy was found warm) and is about to
	// restore over it: whatever keeps the copy up — a standby's counter workers, their
	// tables in RAM — must stop writing it first, and cannot go on as the owner's: its
	// RAM would not match the keys restored under it.
	Unwarm func()
	// Replacing, when set, is called before the local state is replaced — by a restore,
	// once the backup has passed its checks (one refused leaves the state and its files
	// as they were), or by the clear of a piece never backed up — so that what is kept
	// beside it of the state it held goes first: a counter partition's snapshot files,
	// which a claim that fails after its restore, or a process killed right after one,
	// left beside the restored keys, to be loaded with them at the next start
	// (stages/counter ties a snapshot to its state as well: such a file was not loaded).
	Replacing func()
}

// clear deletes pc's keys, for a piece never backed up.
func (b *Backups) clear(pc Piece) error {
	if pc.Replacing != nil {
		pc.Replacing()
	}
	return b.DB.Clear(pc.Keys)
}

// Current is what the pointer of a Piece records: its current backup and the positions
// that backup reflects, and the piece's last owner.
type Current struct {
	Object string
	Pos    []uint64
	Owner  string
	Gen    uint64 // one more with every backup made current
}

// Current reads the pointer of the piece called name.
func (b *Backups) Current(ctx context.Context, name string) (Current, error) {
	st, err := b.logStream(ctx)
	if err != nil {
		return Current{}, err
	}
	cur, _, err := b.readPointer(ctx, st, name)
	return Current{Object: cur.Object, Pos: cur.Pos, Owner: cur.Owner, Gen: cur.Gen}, err
}

// Reflects reports whether the local state of pc reflects at least positions pos.
func Reflects(pc Piece, pos []uint64) (bool, error) {
	have, err := pc.Pos()
	if err != nil {
		return false, err
	}
	for i := range min(len(have), len(pos)) { // families may have been added since
		if have[i] < pos[i] {
			return false, nil
		}
	}
	return true, nil
}

// Prime brings pc's state here for a standby, without claiming anything: from the
// current backup unless the local state reflects its positions already ("local"), or
// empty when no backup was ever stored ("empty": the streams then hold everything).
// The state of the piece's last owner, self, stays as it is. It returns what it
// started from and the pointer it read.
func (b *Backups) Prime(ctx context.Context, pc Piece, self string) (string, Current, error) {
	st, err := b.logStream(ctx)
	if err != nil {
		return "", Current{}, err
	}
	ptr, _, err := b.readPointer(ctx, st, pc.Name)
	if err != nil {
		return "", Current{}, err
	}
	cur := Current{Object: ptr.Object, Pos: ptr.Pos, Owner: ptr.Owner, Gen: ptr.Gen}
	if ptr.Owner == self {
		return "local", cur, nil
	}
	if ok, err := Reflects(pc, ptr.Pos); err != nil || (ok && ptr.Object != "") {
		return "local", cur, err
	}
	if ptr.Object == "" {
		if ptr.Owner == "" { // nobody owned it yet: whatever is here is nobody's
			return "local", cur, nil
		}
		return "empty", cur, b.clear(pc)
	}
	err = b.restore(ctx, pc, ptr)
	if errors.Is(err, ErrDamagedBackup) && !ptr.Damaged {
		// The owner's next backup replaces it, changed or not (see Store): an idle
		// partition's standby would otherwise read it again and again, for good.
		b.markDamaged(ctx, pc.Name, nil, ptr.Object)
	}
	return "backup", cur, err
}

// Backups stores pieces of state in a NATS object store and restores them: a backup
// becomes current only through its pointer, written under the owner's lease.
type Backups struct {
	JS       jetstream.JetStream
	Obs      jetstream.ObjectStore
	DB       *cold.DB
	Subjects pipeline.Subjects
	Log      *slog.Logger
	TmpDir   string // where a restore stages the object before it checks it
	// SweepLater, when set, runs a claim's sweep of the backups that can never become
	// current (see sweep) instead of the claim: a cleanup, which took 30–300 ms of a
	// planned move on a loaded cluster, while reads of the partition waited.
	SweepLater func(sweep func())

	mu      sync.Mutex
	log     jetstream.Stream // the log stream, looked up once: pointers are read often
	obsName string           // Obs's name, looked up once (see putObject)
}

// bucket is the name of the object store the backups are stored in.
func (b *Backups) bucket(ctx context.Context) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.obsName == "" {
		st, err := b.Obs.Status(ctx)
		if err != nil {
			return "", err
		}
		b.obsName = st.Bucket()
	}
	return b.obsName, nil
}

// logStream is the stream that holds the pointers.
func (b *Backups) logStream(ctx context.Context) (jetstream.Stream, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.log == nil {
		st, err := b.JS.Stream(ctx, b.Subjects.LogStream())
		if err != nil {
			return nil, err
		}
		b.log = st
	}
	return b.log, nil
}

// LastOwner is the node id of the last process whose state name's pointer records ("" when
// nobody's yet).
func (b *Backups) LastOwner(ctx context.Context, name string) (string, error) {
	st, err := b.logStream(ctx)
	if err != nil {
		return "", err
	}
	cur, _, err := b.readPointer(ctx, st, name)
	return cur.Owner, err
}

// Store writes a backup of pc while l is held and makes it current. It returns the
// backup's size and the positions it covers, which may be purged now.
//
// A piece still at the positions of its current backup, whose pointer l holds (a backup
// l's owner stored, or the one it claimed and took over as it was), is not stored
// again when that backup is of this layout: it reflects the state already. Store then
// returns no positions, and nothing more may be purged. Storing it anyway cost every backup period a copy of
// every id of an idle partition, all of them written to NATS again: with 10 M ids a
// process, more than the period itself, so that the backups never ended and the
// takeovers, primes and queries of a failover queued behind them.
func (b *Backups) Store(ctx context.Context, pc Piece, l *Lease) (uint64, []uint64, error) {
	if !l.Valid() {
		return 0, nil, fmt.Errorf("the lease %s is not certainly held", l.Key())
	}
	pos, err := pc.Pos()
	if err != nil {
		return 0, nil, err
	}
	st, err := b.logStream(ctx)
	if err != nil {
		return 0, nil, err
	}
	cur, _, err := b.readPointer(ctx, st, pc.Name)
	if err != nil {
		return 0, nil, err
	}
	if cur.heldBy(l) && cur.Object != "" && cur.Layout == cold.Layout && !cur.Damaged && slices.Equal(cur.Pos, pos) {
		return 0, nil, nil
	}
	obj := fmt.Sprintf("%s.%s.%s", pc.Name, l.Token(), nuid.Next())
	pr, pw := io.Pipe()
	read := make(chan struct{})
	go func() {
		defer close(read)
		pw.CloseWithError(b.DB.Backup(pw, pc.Keys))
	}()
	// The layout is in the backup's header too, which a restore goes by; here it lets a
	// restore refuse a newer one before it reads it, and an operator see it.
	meta := map[string]string{"owner": l.ID(), "lease": l.Token(), "pos": formatPos(pos), "layout": strconv.Itoa(cold.Layout)}
	bucket, err := b.bucket(ctx)
	if err != nil {
		pr.CloseWithError(err)
		<-read
		return 0, nil, err
	}
	info, err := putObject(ctx, b.JS, bucket, jetstream.ObjectMeta{Name: obj, Metadata: meta}, pr)
	pr.CloseWithError(err) // a Put that stopped reading ends the backup's writes
	<-read                 // never reading the database after the caller (Close) closes it
	if err != nil {
		return 0, nil, err
	}
	var seen pointer
	err = b.setPointer(ctx, pc.Name, func(cur pointer) (pointer, error) {
		seen = cur
		if !cur.heldBy(l) {
			return cur, fmt.Errorf("%w: %s's pointer holds %s's lease revision %d, this backup was taken under %s", ErrSuperseded, pc.Name, cur.Owner, cur.Lease, l.Token())
		}
		return pointer{Object: obj, Taken: l.Token(), Pos: pos, Owner: l.ID(), Lease: l.Acquired(), Epoch: l.Epoch(), Gen: cur.Gen + 1, Layout: cold.Layout}, nil
	})
	if err != nil {
		// A backup never current is dropped; one whose pointer write went unanswered
		// may be current and is left (the next backup deletes it if so).
		if errors.Is(err, ErrSuperseded) && seen.Object != obj {
			_ = b.Obs.Delete(ctx, obj)
		}
		return 0, nil, err
	}
	if seen.Object != "" && seen.Object != obj { // nobody restores it any more: see claim
		if err := b.Obs.Delete(ctx, seen.Object); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			b.Log.Warn("cannot delete a state backup no longer current", "object", seen.Object, "err", err)
		}
	}
	return info.Size, pos, nil
}

// Claim makes this process the owner recorded in pc's pointer (l is held) and reports
// where its state comes from: "local" when this process was its last owner (or nobody
// was), else "standby" when pc is Warm and reflects the backup's positions, else
// "backup" restored from the backup the pointer names, or "empty" when none was ever
// stored (the streams are then replayed from their start). It refuses a backup
// that is gone or older than the pointer says (ErrStaleBackup).
func (b *Backups) Claim(ctx context.Context, pc Piece, l *Lease) (string, error) {
	var last pointer
	legacy := false
	// First the lease goes in, which fences the last owner's backups; the owner only
	// once the state is here, so that a restore that failed is done again.
	err := b.setPointer(ctx, pc.Name, func(cur pointer) (pointer, error) {
		if cur.Epoch == l.Epoch() && cur.Lease > l.Acquired() {
			return cur, fmt.Errorf("%w: %s was claimed by %s under a newer lease (%d > %d)", ErrOwned, pc.Name, cur.Owner, cur.Lease, l.Acquired())
		}
		if cur.Owner == "" {
			var err error
			if cur, legacy, err = b.legacyPointer(ctx, pc.Name); err != nil {
				return cur, err
			}
		}
		last = cur
		if cur.Owner == "" {
			cur.Owner = l.ID()
		}
		cur.Lease, cur.Epoch = l.Acquired(), l.Epoch()
		return cur, nil
	})
	if err != nil {
		return "", fmt.Errorf("cannot claim %s: %w", pc.Name, err)
	}
	from := "local"
	if last.Owner != "" && last.Owner != l.ID() {
		start := time.Now()
		warm := false
		if pc.Warm {
			if warm, err = Reflects(pc, last.Pos); err != nil {
				return "", err
			}
		}
		if pc.Warm && !warm && pc.Unwarm != nil {
			pc.Unwarm()
		}
		switch {
		case warm:
			from = "standby"
		case last.Object == "":
			from = "empty"
			err = b.clear(pc)
		default:
			from = "backup"
			err = b.restore(ctx, pc, last)
			if errors.Is(err, ErrDamagedBackup) && !last.Damaged {
				b.markDamaged(ctx, pc.Name, l, last.Object)
			}
		}
		if err != nil {
			return "", fmt.Errorf("cannot restore %s: %w", pc.Name, err)
		}
		err = b.setPointer(ctx, pc.Name, func(cur pointer) (pointer, error) {
			if !cur.heldBy(l) {
				return cur, fmt.Errorf("%w: %s's pointer holds %s's lease revision %d, not %d", ErrSuperseded, pc.Name, cur.Owner, cur.Lease, l.Acquired())
			}
			cur.Owner = l.ID()
			return cur, nil
		})
		if err != nil {
			return "", fmt.Errorf("cannot claim %s: %w", pc.Name, err)
		}
		b.Log.Info("took state over", "what", pc.Name, "from", from, "object", last.Object, "last owner", last.Owner, "took", time.Since(start))
	}
	if legacy {
		_ = b.Obs.Delete(ctx, legacyOwner(pc.Name))
	}
	if sweep := func() { b.sweep(ctx, pc.Name, l) }; b.SweepLater != nil {
		b.SweepLater(sweep)
	} else {
		sweep()
	}
	// Claiming and restoring took part of the lease's TTL, and nothing renews it before
	// the partition runs (and checks it at its first write): renew it now.
	if err := l.Renew(ctx); errors.Is(err, ErrLost) {
		return "", fmt.Errorf("lost %s while claiming it: %w", pc.Name, err)
	} else if err != nil {
		b.Log.Warn("cannot renew the lease yet", "key", l.Key(), "err", err)
	}
	return from, nil
}

// sweep deletes the backups of name taken under a lease older than l that the pointer
// does not name: once l has claimed the pointer none of them can become current (a
// process killed between storing a backup and writing the pointer leaves one). Those of
// newer leases are left to their owners.
func (b *Backups) sweep(ctx context.Context, name string, l *Lease) {
	st, err := b.logStream(ctx)
	if err != nil {
		return
	}
	cur, _, err := b.readPointer(ctx, st, name)
	if err != nil || !cur.heldBy(l) { // revisions compare only within one bucket
		return
	}
	objs, err := b.Obs.List(ctx)
	if err != nil {
		if !errors.Is(err, jetstream.ErrNoObjectsFound) {
			b.Log.Warn("cannot list the state backups", "err", err)
		}
		return
	}
	for _, o := range objs {
		rest, ok := strings.CutPrefix(o.Name, name+".")
		if parts := strings.Split(rest, "."); !ok || o.Name == cur.Object || len(parts) != 3 {
			continue
		} else if rev, err := strconv.ParseUint(parts[1], 10, 64); err != nil || rev >= l.Acquired() {
			continue
		}
		if err := b.Obs.Delete(ctx, o.Name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			b.Log.Warn("cannot delete a state backup never current", "object", o.Name, "err", err)
		}
	}
}

// restore loads the backup ptr names, checking that it is the one the pointer records
// and of a layout this process knows (cold.ErrNewerLayout: a process of an older version
// cannot take a partition over from a newer one). An older layout's keys are moved to
// this one as they are loaded (cold.DB.Restore).
//
// A backup that cannot be read whole, by its object's digest or its own checksums, is
// refused with ErrDamagedBackup; one the pointer says is damaged is refused unread.
func (b *Backups) restore(ctx context.Context, pc Piece, ptr pointer) error {
	if ptr.Damaged {
		return fmt.Errorf("%w: backup %s was found damaged by an earlier claim: only %s, the last owner of %s, can take it (with its local state)", ErrDamagedBackup, ptr.Object, ptr.Owner, pc.Name)
	}
	obj, err := b.Obs.Get(ctx, ptr.Object)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return fmt.Errorf("%w: backup %s is gone", ErrStaleBackup, ptr.Object)
	}
	if err != nil {
		return err
	}
	defer obj.Close()
	if info, _ := obj.Info(); info != nil {
		if ptr.Taken != "" && info.Metadata["lease"] != ptr.Taken {
			return fmt.Errorf("%w: backup %s was taken under %q, the pointer says %q", ErrStaleBackup, ptr.Object, info.Metadata["lease"], ptr.Taken)
		}
		if l, err := strconv.Atoi(info.Metadata["layout"]); err == nil && l > cold.Layout {
			return fmt.Errorf("%w: backup %s is of layout %d, this tallyd knows layouts up to %d: a tallyd of a newer version must take %s", cold.ErrNewerLayout, ptr.Object, l, cold.Layout, pc.Name)
		}
	}
	if err := b.DB.RestoreReplacing(obj, pc.Keys, b.TmpDir, pc.Replacing); err != nil {
		if errors.Is(err, jetstream.ErrDigestMismatch) || errors.Is(err, cold.ErrCorrupt) {
			return fmt.Errorf("%w: backup %s: %w: only %s, the last owner of %s, can take it (with its local state)", ErrDamagedBackup, ptr.Object, err, ptr.Owner, pc.Name)
		}
		return fmt.Errorf("backup %s: %w", ptr.Object, err)
	}
	if ok, err := Reflects(pc, ptr.Pos); err != nil || !ok {
		if err == nil {
			err = fmt.Errorf("%w: backup %s reflects less than the positions %v its pointer says", ErrStaleBackup, ptr.Object, ptr.Pos)
		}
		return err
	}
	return nil
}

// markDamaged records in name's pointer that its backup object cannot be read
// (pointer.Damaged), while the pointer still names it and, with l, holds l: a claim
// marks it under its lease, a standby's prime (l nil) under nobody's, as the mark
// changes no owner. A failure only costs the next reader a read of the object.
func (b *Backups) markDamaged(ctx context.Context, name string, l *Lease, object string) {
	err := b.setPointer(ctx, name, func(cur pointer) (pointer, error) {
		if l != nil && !cur.heldBy(l) || cur.Object != object {
			return cur, fmt.Errorf("%w: the pointer moved on", ErrSuperseded)
		}
		cur.Damaged = true
		return cur, nil
	})
	if err != nil {
		b.Log.Warn("cannot mark a state backup damaged", "object", object, "err", err)
		return
	}
	b.Log.Error("a state backup cannot be read; only its last owner can take the state over, and its next backup replaces it", "object", object, "what", name)
}

func formatPos(pos []uint64) string {
	s := make([]string, len(pos))
	for i, p := range pos {
		s[i] = strconv.FormatUint(p, 10)
	}
	return strings.Join(s, ",")
}
