package cold

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"
	"github.com/tally-dev/tally/store/internal/keys"
)

// The key layout has a version. A database records the one it is in (after Migrate),
// and every backup says the one it was written in (in its checksummed header), so that
// state of an older layout is moved to this one wherever it comes from — Migrate for a
// local database at start, Restore for a partition moving here from a process of an
// older version — and state of a newer one is refused (ErrNewerLayout), never half read.
// A change of layout adds a version below and its step to layoutSteps.
const (
	// layoutPartitioned: every event-stage key carries its partition (Migrate moves the
	// keys of layout 0, by id alone, which only local databases hold: partition backups
	// began with this layout). A like is a relation key and two list keys, as a follow.
	// A backup of format TLYB2, which says no layout, is of this layout or the next.
	layoutPartitioned = 1
	// layoutLikes: a user's likes in a like record, a post's likers in liker chunks
	// (likes.go).
	layoutLikes = 2
	// layoutStates: a relation keeps its state by the places of its events (store/rel):
	// like records of states, tombstones included (L|p|'r'|u, where layout 2 had
	// L|p|'l'|u), and relation keys whose values are states (those of layout 2 are read
	// as they are).
	layoutStates = 3
	// Layout is the layout this code writes, and the newest it reads.
	Layout = layoutStates
)

// layoutKey holds the layout a database is in (none before Migrate first recorded it).
func layoutKey() key { return newKey(keys.NSLayout, 7).Bytes([]byte("layout")) }

// layout is the layout the database records, 0 when it records none.
func (d *DB) layout() (int, error) {
	var l uint64
	err := d.View(func(txn *Txn) error {
		item, err := txn.get(layoutKey())
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		} else if err != nil {
			return err
		}
		return item.Value(func(v []byte) error {
			var n int
			if l, n = binary.Uvarint(v); n <= 0 {
				return fmt.Errorf("%w: layout record %x", ErrCorrupt, v)
			}
			return nil
		})
	})
	return int(l), err
}

func (d *DB) setLayout() error {
	return d.Update(func(txn *Txn) error {
		return txn.Set(layoutKey(), binary.AppendUvarint(nil, Layout))
	})
}

// layoutStep is how the keys of one partition move to a layout from the one before it,
// once the keys are under their partitions (layoutPartitioned): Migrate runs it over
// every partition of a database once (marked done by mark), upgrade over a restored
// part.
type layoutStep struct {
	to   int // the layout it moves to; a part of a layout below takes it
	mark string
	what string
	move func(db *DB, w *groupWriter, from, to int) (int, error)
}

// layoutSteps are the steps from layoutPartitioned to Layout, in order: a change of
// layout adds one here.
var layoutSteps = []layoutStep{
	{layoutLikes, "likes", "likes to like records", moveLikes},
	{layoutStates, "like-states", "like records to relation states", moveLikeStates},
}

// upgrade moves the keys of part, just restored from a backup of layout from, to this
// layout: the steps after from, for each event partition of part, in transactions of
// at most maxGroupOps changes. It returns how many keys it moved.
func (d *DB) upgrade(part Part, from int) (int, error) {
	moved := 0
	for _, p := range part.events {
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
