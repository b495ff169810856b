package cluster

// A backup's pointer: the record in the log stream naming a piece's current backup and
// its last owner, read and written by compare-and-set (see backup.go), and what a prefix
// backed up before pointers existed holds instead.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/stages/flow"
)

// pointer names the current state backup of a Piece and its last owner.
type pointer struct {
	Object string   `json:"object,omitempty"` // the backup's object ("" none yet)
	Taken  string   `json:"taken,omitempty"`  // the lease token it was taken under
	Pos    []uint64 `json:"pos,omitempty"`    // positions its state reflects (see Piece.pos)
	// Owner is the node id of the last process whose state is the Piece's; Lease the
	// revision of the newest lease that claimed it (a claim restoring a backup writes it
	// before Owner), in the ownership bucket made at Epoch (see lease.epoch).
	Owner string `json:"owner"`
	Lease uint64 `json:"lease"`
	Epoch int64  `json:"epoch,omitempty"`
	// Gen counts the backups made current: a standby tells by it that it missed one.
	Gen uint64 `json:"gen,omitempty"`
	// Layout is the state layout of the backup (cold.Layout of the process that stored
	// it; 0 when stored by a version that did not say): one of an older layout is
	// stored again in this one's, changed or not (see Store).
	Layout int `json:"layout,omitempty"`
	// Damaged says a claim found Object unreadable (ErrDamagedBackup): the next claims
	// refuse it without reading it again, and the last owner's next backup replaces it,
	// changed or not. Cleared with the next backup.
	Damaged bool `json:"damaged,omitempty"`
}

// heldBy reports whether the pointer holds lease l: only then may l's owner write it.
func (p pointer) heldBy(l *Lease) bool {
	return p.Lease == l.Acquired() && p.Epoch == l.Epoch()
}

// setPointer writes name's pointer by compare-and-set: next gets the current one (zero
// when there is none) and returns the one to write, or an error to give up with. A write
// that lost the race is tried again on what won it; an unanswered one is an error (it may
// have gone through: the caller's next write sees).
func (b *Backups) setPointer(ctx context.Context, name string, next func(cur pointer) (pointer, error)) error {
	subj := b.Subjects.BackupPointer(name)
	st, err := b.logStream(ctx)
	if err != nil {
		return err
	}
	for attempt := 1; ; attempt++ {
		cur, seq, err := b.readPointer(ctx, st, name)
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
		ack, err := b.JS.Publish(ctx, subj, data, jetstream.WithExpectLastSequencePerSubject(seq))
		if err == nil {
			// Only the last record of the subject matters.
			if err := st.Purge(ctx, jetstream.WithPurgeSubject(subj), jetstream.WithPurgeSequence(ack.Sequence)); err != nil {
				b.Log.Warn("cannot purge older pointer records", "subject", subj, "err", err)
			}
			return nil
		}
		if !flow.Fenced(err) || attempt == 3 {
			return fmt.Errorf("cannot write the pointer %s: %w", subj, err)
		}
	}
}

// readPointer reads name's pointer and its sequence (zero and 0 when there is none).
func (b *Backups) readPointer(ctx context.Context, st jetstream.Stream, name string) (pointer, uint64, error) {
	var cur pointer
	subj := b.Subjects.BackupPointer(name)
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
func (b *Backups) legacyPointer(ctx context.Context, name string) (pointer, bool, error) {
	last, err := b.Obs.GetString(ctx, legacyOwner(name))
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return pointer{}, false, nil
	}
	if err != nil {
		return pointer{}, false, fmt.Errorf("cannot read the last owner: %w", err)
	}
	p := pointer{Owner: last}
	_, err = b.Obs.GetInfo(ctx, name)
	switch {
	case err == nil:
		p.Object = name
	case !errors.Is(err, jetstream.ErrObjectNotFound):
		return p, false, err
	}
	return p, true, nil
}

func legacyOwner(name string) string { return "owner." + name }
