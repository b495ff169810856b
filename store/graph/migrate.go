package graph

import (
	"fmt"
	"math"

	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/internal/keys"
)

// The layout before every event-stage key carried its partition: relations, readers,
// notifications and posts were keyed by id alone, and the processes that shared a
// database read each other's. Migrate moves them under their partitions.
const (
	nsRelationV0  = 'r' // r|kind|a|b|c
	nsBySubjectV0 = 's' // s|kind|a|^time|b|c
	nsByObjectV0  = 'o' // o|kind|b|^time|a|c
	nsReadSeqV0   = 'v' // v|uid
	nsNotifiedV0  = 'n' // n|uid|kind|seq
	nsPostsV0     = 'e' // e|author|seq|post → pushed
	nsPulledV0    = 'q' // q|author
	nsReaderV1    = 'u' // written before places were used; nothing reads them
	nsPostV1      = 't'
	nsSystemV1    = 'y'
)

// Migrate moves the keys of the old layout to the partitions that own them now, with
// partitions partitions and partOf the partition of an id, then through every later
// layout (layoutSteps): a relation and its subject's
// list go to the subject's partition, a follow's follower list to the followed user's, a
// reader's state and notifications to the reader's, a post to its author's. A pulled post
// is recorded in every partition (see PutPulled). It returns how many keys it moved; a
// database in the new layout moves none, after one look per old namespace. It is
// idempotent: a crash halfway leaves old keys that the next call moves again. Once all
// is moved it records the database's layout; it refuses a database that records a
// newer one than this code knows (ErrNewerLayout), before changing anything.
func Migrate(db *cold.DB, partitions int, partOf func(id uint64) int) (int, error) {
	if l, err := db.RecordedLayout(); err != nil {
		return 0, err
	} else if l > cold.Layout {
		return 0, fmt.Errorf("%w: the database is of layout %d, this tallyd knows layouts up to %d: run a tallyd of layout %d or newer on it", cold.ErrNewerLayout, l, cold.Layout, l)
	}
	moved := 0
	for _, ns := range []byte{nsRelationV0, nsBySubjectV0, nsByObjectV0, nsReadSeqV0, nsNotifiedV0, nsPostsV0, nsPulledV0, nsReaderV1, nsPostV1, nsSystemV1} {
		n, err := migrate(db, ns, func(k, v []byte, set func(key, []byte) error) error {
			return moveKey(k, v, partitions, partOf, set)
		})
		moved += n
		if err != nil {
			return moved, fmt.Errorf("cannot move the keys of namespace %q to their partitions: %w", ns, err)
		}
	}
	for _, step := range layoutSteps {
		n, err := migrateOnce(db, step.mark, step.move)
		if moved += n; err != nil {
			return moved, err
		}
	}
	if l, err := db.RecordedLayout(); err != nil || l == cold.Layout {
		return moved, err
	}
	return moved, db.RecordLayout()
}

// moveKey writes through set the new keys of one old key (none for what nothing reads).
func moveKey(k, v []byte, partitions int, partOf func(uint64) int, set func(key, []byte) error) error {
	bad := fmt.Errorf("%w: old key %x", cold.ErrCorrupt, k)
	rest := k[1:]
	switch k[0] {
	case nsRelationV0, nsBySubjectV0, nsByObjectV0:
		if (k[0] == nsRelationV0 && len(k) != 26) || (k[0] != nsRelationV0 && len(k) != 34) {
			return bad
		}
		ns := map[byte]byte{nsRelationV0: keys.NSRelation, nsBySubjectV0: keys.NSBySubject, nsByObjectV0: keys.NSByObject}[k[0]]
		owner := u64at(k, 2) // the subject, first
		if k[0] == nsByObjectV0 && Kind(k[1]) != Follow {
			owner = u64at(k, 18) // a like's likers stay with the likers
		}
		return set(newKey(ns, len(k)+2).U16(partOf(owner)).U8(k[1]).Bytes(k[2:]), v)
	case nsReadSeqV0, nsNotifiedV0:
		if len(rest) < 8 {
			return bad
		}
		ns := map[byte]byte{nsReadSeqV0: keys.NSReader, nsNotifiedV0: keys.NSNotified}[k[0]]
		return set(newKey(ns, len(k)+2).U16(partOf(u64at(k, 1))).Bytes(rest), v)
	case nsPostsV0:
		if len(k) != 25 || len(v) != 1 {
			return bad
		}
		author := u64at(k, 1)
		if err := set(newKey(keys.NSPosts, 27).U16(partOf(author)).Bytes(rest), v); err != nil {
			return err
		}
		if v[0] == 0 { // pulled: every partition's readers count it
			for q := range partitions {
				if err := set(newKey(keys.NSPulled, 11).U16(q).U64(author), nil); err != nil {
					return err
				}
				if err := set(newKey(keys.NSPulledAt, 19).U16(q).U64(author).U64(u64at(k, 9)), nil); err != nil {
					return err
				}
			}
		}
	}
	return nil // pulled sets are made again from the posts; the oldest keys go
}

// migrate rewrites every key under the namespace byte ns through move and deletes it.
func migrate(d *cold.DB, ns byte, move func(k, v []byte, set func(key, []byte) error) error) (int, error) {
	wb := d.NewBatch()
	defer wb.Cancel()
	n := 0
	err := d.View(func(txn *cold.Txn) error {
		prefix := []byte{ns}
		it := txn.Iterator(cold.IteratorOptions{Prefix: prefix, PrefetchValues: true})
		defer it.Close()
		for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
			k := it.KeyCopy(nil)
			v, err := it.ValueCopy(nil)
			if err != nil {
				return err
			}
			if err := move(k, v, func(nk key, nv []byte) error { return wb.Set(nk, nv) }); err != nil {
				return err
			}
			if err := wb.Delete(k); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	if err != nil {
		return n, err
	}
	return n, wb.Flush()
}

// migrateOnce runs move over every partition unless the layout mark name says it ran:
// the mark is set once all has moved, in the last transaction, so a crash halfway moves
// the rest at the next call, and later calls read one key.
func migrateOnce(db *cold.DB, name string, move func(db *cold.DB, w *groupWriter, from, to int) (int, error)) (int, error) {
	done := newKey(keys.NSLayout, 1+len(name)).Bytes([]byte(name))
	var ran bool
	if err := db.View(func(txn *cold.Txn) (err error) { ran, err = txn.Get(done, nil); return err }); err != nil || ran {
		return 0, err
	}
	w := &groupWriter{db: db}
	defer w.discard()
	n, err := move(db, w, 0, math.MaxUint16)
	if err == nil {
		err = w.group(func(txn *cold.Txn) error { return txn.Set(done, nil) }, 1)
	}
	if err != nil {
		return n, err
	}
	return n, w.commit()
}

// layoutStep is how the keys of one partition move to a layout from the one before it,
// once the keys are under their partitions (cold.LayoutPartitioned): Migrate runs it
// over every partition of a database once (marked done by mark), Upgrade over a
// restored partition.
type layoutStep struct {
	to   int // the layout it moves to; a partition of a layout below takes it
	mark string
	what string
	move func(db *cold.DB, w *groupWriter, from, to int) (int, error)
}

// layoutSteps are the steps from cold.LayoutPartitioned to cold.Layout, in order: a
// change of layout adds one here.
var layoutSteps = []layoutStep{
	{cold.LayoutLikes, "likes", "likes to like records", moveLikes},
	{cold.LayoutStates, "like-states", "like records to relation states", moveLikeStates},
	{cold.LayoutNoteChunks, "note-chunks", "notifications to chunks", nothingMoves},
	{cold.LayoutOutboxInLog, "outbox-in-log", "outbox entries to the log", nothingMoves},
	// A counter partition moves its own records as it loads them (checkpoint.MoveRecords):
	// nothing of an event partition's moves.
	{cold.LayoutWindowedCounts, "windowed-counts", "counters to their window records", nothingMoves},
}

// nothingMoves is a layout step that reads what the layout before wrote as it is.
func nothingMoves(*cold.DB, *groupWriter, int, int) (int, error) { return 0, nil }

// Upgrade moves the keys of event partitions events, just restored from a backup of
// layout from, to this layout (a cold.Upgrade: cold.Options.Upgrade): the steps after
// from, for each partition, in transactions of at most maxGroupOps changes. It returns
// how many keys it moved.
func Upgrade(d *cold.DB, events []int, from int) (int, error) {
	moved := 0
	for _, p := range events {
		for _, step := range layoutSteps {
			if from >= step.to {
				continue
			}
			w := &groupWriter{db: d}
			n, err := step.move(d, w, p, p)
			if err == nil {
				err = w.commit()
			}
			w.discard()
			moved += n
			if err != nil {
				return moved, fmt.Errorf("cannot move partition %d's %s: %w", p, step.what, err)
			}
		}
	}
	return moved, nil
}
