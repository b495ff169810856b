package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/tally-dev/tally/stages/cluster"
	"github.com/tally-dev/tally/stages/flow"
	"github.com/tally-dev/tally/store/cold"
)

// ErrStaleBackup is a restore refused: the backup the pointer names is gone, or older
// than the pointer says. Starting from it (or from nothing) would lose what was purged
// after the backup the pointer records.
var ErrStaleBackup = errors.New("the state backup is missing or older than its pointer says")

// errSuperseded is a backup that cannot become current: another owner, under a newer
// lease, has claimed the partition since this one's lease was checked.
var errSuperseded = errors.New("another owner has claimed the partition")

// A state backup is an object of its own, under a name no other write uses, and becomes
// current only through its pointer: a record in the log stream (Subjects.BackupPointer),
// which never ages out, written by compare-and-set on the subject's last sequence. A new
// owner first writes its lease revision into the pointer, then restores the backup the
// pointer names, then writes itself in as the last owner; an owner writes a pointer only
// while the pointer still holds its own lease, and purges what a backup covers only once
// the backup is current. So an old
// owner that was paused after its lease check, and writes a backup after the new owner
// claimed the partition, neither makes it current nor purges anything.

// pointer names the current state backup of a piece and its last owner.
type pointer struct {
	Object string   `json:"object,omitempty"` // the backup's object ("" none yet)
	Taken  string   `json:"taken,omitempty"`  // the lease token it was taken under
	Pos    []uint64 `json:"pos,omitempty"`    // positions its state reflects (see piece.pos)
	// Owner is the node id of the last process whose state is the piece's; Lease the
	// revision of the newest lease that claimed it (a claim restoring a backup writes it
	// before Owner), in the ownership bucket made at Epoch (see lease.epoch).
	Owner string `json:"owner"`
	Lease uint64 `json:"lease"`
	Epoch int64  `json:"epoch,omitempty"`
}

// heldBy reports whether the pointer holds lease l: only then may l's owner write it.
func (p pointer) heldBy(l *cluster.Lease) bool {
	return p.Lease == l.Acquired() && p.Epoch == l.Epoch()
}

// piece is state that moves between processes as one: one partition's event stage's
// or its counters' (every family of them).
type piece struct {
	name string // of its pointer and, with a unique suffix, of its backups
	part cold.Part
	// pos reads the positions its stored state reflects: the event stage's last log
	// record, or each family's last delta applied. Read before a backup, they are covered by it.
	pos func() ([]uint64, error)
}

func (n *Node) counterPiece(p int) piece {
	return piece{counterObject(p), cold.CounterPart(n.families(), p), func() ([]uint64, error) {
		pos := make([]uint64, len(n.cfg.Families))
		for i, f := range n.cfg.Families {
			cp, err := cold.LoadCheckpoint(n.db, f.Name, p)
			if err != nil {
				return nil, err
			}
			pos[i] = cp.Pos
		}
		return pos, nil
	}}
}

// store writes a backup of pc while l is held and makes it current. It returns the
// backup's size and the positions it covers, which may be purged now.
func (n *Node) store(ctx context.Context, pc piece, l *cluster.Lease) (uint64, []uint64, error) {
	if !l.Valid() {
		return 0, nil, fmt.Errorf("the lease %s is not certainly held", l.Key())
	}
	pos, err := pc.pos()
	if err != nil {
		return 0, nil, err
	}
	obj := fmt.Sprintf("%s.%s.%s", pc.name, l.Token(), nuid.Next())
	pr, pw := io.Pipe()
	read := make(chan struct{})
	go func() {
		defer close(read)
		pw.CloseWithError(n.db.Backup(pw, pc.part))
	}()
	info, err := n.obs.Put(ctx, jetstream.ObjectMeta{Name: obj, Metadata: map[string]string{"owner": l.ID(), "lease": l.Token(), "pos": formatPos(pos)}}, pr)
	pr.CloseWithError(err) // a Put that stopped reading ends the backup's writes
	<-read                 // never reading the database after the caller (Close) closes it
	if err != nil {
		return 0, nil, err
	}
	var seen pointer
	err = n.setPointer(ctx, pc.name, func(cur pointer) (pointer, error) {
		seen = cur
		if !cur.heldBy(l) {
			return cur, fmt.Errorf("%w: %s's pointer holds %s's lease revision %d, this backup was taken under %s", errSuperseded, pc.name, cur.Owner, cur.Lease, l.Token())
		}
		return pointer{Object: obj, Taken: l.Token(), Pos: pos, Owner: l.ID(), Lease: l.Acquired(), Epoch: l.Epoch()}, nil
	})
	if err != nil {
		// A backup never current is dropped; one whose pointer write went unanswered
		// may be current and is left (the next backup deletes it if so).
		if errors.Is(err, errSuperseded) && seen.Object != obj {
			_ = n.obs.Delete(ctx, obj)
		}
		return 0, nil, err
	}
	if seen.Object != "" && seen.Object != obj { // nobody restores it any more: see claim
		if err := n.obs.Delete(ctx, seen.Object); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			n.log.Warn("cannot delete a state backup no longer current", "object", seen.Object, "err", err)
		}
	}
	return info.Size, pos, nil
}

// claim makes this process the owner recorded in pc's pointer (l is held) and reports
// where its state comes from: "local" when this process was its last owner (or nobody
// was), else "backup" restored from the backup the pointer names, or "empty" when none
// was ever stored (the streams are then replayed from their start). It refuses a backup
// that is gone or older than the pointer says (ErrStaleBackup).
func (n *Node) claim(ctx context.Context, pc piece, l *cluster.Lease) (string, error) {
	var last pointer
	legacy := false
	// First the lease goes in, which fences the last owner's backups; the owner only
	// once the state is here, so that a restore that failed is done again.
	err := n.setPointer(ctx, pc.name, func(cur pointer) (pointer, error) {
		if cur.Epoch == l.Epoch() && cur.Lease > l.Acquired() {
			return cur, fmt.Errorf("%w: %s was claimed by %s under a newer lease (%d > %d)", ErrOwned, pc.name, cur.Owner, cur.Lease, l.Acquired())
		}
		if cur.Owner == "" {
			var err error
			if cur, legacy, err = n.legacyPointer(ctx, pc.name); err != nil {
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
		return "", fmt.Errorf("cannot claim %s: %w", pc.name, err)
	}
	from := "local"
	if last.Owner != "" && last.Owner != l.ID() {
		start := time.Now()
		if from = "backup"; last.Object == "" {
			from = "empty"
			err = n.db.Clear(pc.part)
		} else {
			err = n.restore(ctx, pc, last)
		}
		if err != nil {
			return "", fmt.Errorf("cannot restore %s: %w", pc.name, err)
		}
		err = n.setPointer(ctx, pc.name, func(cur pointer) (pointer, error) {
			if !cur.heldBy(l) {
				return cur, fmt.Errorf("%w: %s's pointer holds %s's lease revision %d, not %d", errSuperseded, pc.name, cur.Owner, cur.Lease, l.Acquired())
			}
			cur.Owner = l.ID()
			return cur, nil
		})
		if err != nil {
			return "", fmt.Errorf("cannot claim %s: %w", pc.name, err)
		}
		n.log.Info("took state over", "what", pc.name, "from", from, "object", last.Object, "last owner", last.Owner, "took", time.Since(start))
	}
	if legacy {
		_ = n.obs.Delete(ctx, legacyOwner(pc.name))
	}
	n.sweep(ctx, pc.name, l)
	// Claiming and restoring took part of the lease's TTL, and nothing renews it before
	// the partition runs (and checks it at its first write): renew it now.
	if err := l.Renew(ctx); errors.Is(err, cluster.ErrLost) {
		return "", fmt.Errorf("lost %s while claiming it: %w", pc.name, err)
	} else if err != nil {
		n.log.Warn("cannot renew the lease yet", "key", l.Key(), "err", err)
	}
	return from, nil
}

// sweep deletes the backups of name taken under a lease older than l that the pointer
// does not name: once l has claimed the pointer none of them can become current (a
// process killed between storing a backup and writing the pointer leaves one). Those of
// newer leases are left to their owners.
func (n *Node) sweep(ctx context.Context, name string, l *cluster.Lease) {
	st, err := n.js.Stream(ctx, n.subjects.LogStream())
	if err != nil {
		return
	}
	cur, _, err := n.readPointer(ctx, st, name)
	if err != nil || !cur.heldBy(l) { // revisions compare only within one bucket
		return
	}
	objs, err := n.obs.List(ctx)
	if err != nil {
		if !errors.Is(err, jetstream.ErrNoObjectsFound) {
			n.log.Warn("cannot list the state backups", "err", err)
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
		if err := n.obs.Delete(ctx, o.Name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			n.log.Warn("cannot delete a state backup never current", "object", o.Name, "err", err)
		}
	}
}

// restore loads the backup ptr names, checking that it is the one the pointer records.
func (n *Node) restore(ctx context.Context, pc piece, ptr pointer) error {
	obj, err := n.obs.Get(ctx, ptr.Object)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return fmt.Errorf("%w: backup %s is gone", ErrStaleBackup, ptr.Object)
	}
	if err != nil {
		return err
	}
	defer obj.Close()
	if info, _ := obj.Info(); info != nil && ptr.Taken != "" && info.Metadata["lease"] != ptr.Taken {
		return fmt.Errorf("%w: backup %s was taken under %q, the pointer says %q", ErrStaleBackup, ptr.Object, info.Metadata["lease"], ptr.Taken)
	}
	if err := n.db.Restore(obj, pc.part, n.cfg.DataDir); err != nil {
		return err
	}
	pos, err := pc.pos()
	if err != nil {
		return err
	}
	for i := range min(len(pos), len(ptr.Pos)) { // families may have been added since
		if pos[i] < ptr.Pos[i] {
			return fmt.Errorf("%w: backup %s reflects positions %v, the pointer says %v", ErrStaleBackup, ptr.Object, pos, ptr.Pos)
		}
	}
	return nil
}

// setPointer writes name's pointer by compare-and-set: next gets the current one (zero
// when there is none) and returns the one to write, or an error to give up with. A write
// that lost the race is tried again on what won it; an unanswered one is an error (it may
// have gone through: the caller's next write sees).
func (n *Node) setPointer(ctx context.Context, name string, next func(cur pointer) (pointer, error)) error {
	subj := n.subjects.BackupPointer(name)
	st, err := n.js.Stream(ctx, n.subjects.LogStream())
	if err != nil {
		return err
	}
	for attempt := 1; ; attempt++ {
		cur, seq, err := n.readPointer(ctx, st, name)
		if err != nil {
			return err
		}
		want, err := next(cur)
		if err != nil {
			return err
		}
		data, err := json.Marshal(want)
		if err != nil {
			return err
		}
		ack, err := n.js.Publish(ctx, subj, data, jetstream.WithExpectLastSequencePerSubject(seq))
		if err == nil {
			// Only the last record of the subject matters.
			if err := st.Purge(ctx, jetstream.WithPurgeSubject(subj), jetstream.WithPurgeSequence(ack.Sequence)); err != nil {
				n.log.Warn("cannot purge older pointer records", "subject", subj, "err", err)
			}
			return nil
		}
		if !flow.Fenced(err) || attempt == 3 {
			return fmt.Errorf("cannot write the pointer %s: %w", subj, err)
		}
	}
}

// readPointer reads name's pointer and its sequence (zero and 0 when there is none).
func (n *Node) readPointer(ctx context.Context, st jetstream.Stream, name string) (pointer, uint64, error) {
	var cur pointer
	subj := n.subjects.BackupPointer(name)
	m, err := st.GetLastMsgForSubject(ctx, subj)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return cur, 0, nil
	case err != nil:
		return cur, 0, fmt.Errorf("cannot read the pointer %s: %w", subj, err)
	}
	if err := json.Unmarshal(m.Data, &cur); err != nil {
		return cur, 0, fmt.Errorf("pointer %s: %w", subj, err)
	}
	return cur, m.Sequence, nil
}

// legacyPointer is what a prefix backed up before pointers existed holds: the last owner
// in object owner.<name>, the backup under name itself.
func (n *Node) legacyPointer(ctx context.Context, name string) (pointer, bool, error) {
	last, err := n.obs.GetString(ctx, legacyOwner(name))
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return pointer{}, false, nil
	}
	if err != nil {
		return pointer{}, false, fmt.Errorf("cannot read the last owner: %w", err)
	}
	p := pointer{Owner: last}
	_, err = n.obs.GetInfo(ctx, name)
	switch {
	case err == nil:
		p.Object = name
	case !errors.Is(err, jetstream.ErrObjectNotFound):
		return p, false, err
	}
	return p, true, nil
}

func legacyOwner(name string) string { return "owner." + name }

func formatPos(pos []uint64) string {
	s := make([]string, len(pos))
	for i, p := range pos {
		s[i] = strconv.FormatUint(p, 10)
	}
	return strings.Join(s, ",")
}
