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
// A change of layout adds a version below and its step to store/graph's layout steps
// (every change so far moved relations and likes).
const (
	// LayoutPartitioned: every event-stage key carries its partition (graph.Migrate
	// moves the keys of layout 0, by id alone, which only local databases hold:
	// partition backups began with this layout). A like is a relation key and two list
	// keys, as a follow. A backup of format TLYB2, which says no layout, is of this
	// layout or the next.
	LayoutPartitioned = 1
	// LayoutLikes: a user's likes in a like record, a post's likers in liker chunks
	// (store/graph's likes.go).
	LayoutLikes = 2
	// LayoutStates: a relation keeps its state by the places of its events (store/rel):
	// like records of states, tombstones included (L|p|'r'|u, where layout 2 had
	// L|p|'l'|u), and relation keys whose values are states (those of layout 2 are read
	// as they are).
	LayoutStates = 3
	// LayoutNoteChunks: the notifications a transaction records for a user and kind
	// past the reader state's go under one key whose value lists their places, and
	// those it takes back that earlier ones recorded under keys of their own that counts
	// subtract (store/unread's notes.go), where each place was a key of its own with no
	// value — which reads as a chunk of one: nothing moves, but a tallyd of layout 3
	// would count a chunk as one notification, and a place taken back as one more.
	LayoutNoteChunks = 4
	// LayoutOutboxInLog: an event stage that logs keeps its outbox in its log records,
	// its state saying from which entry on they may be unsent (stagelog.State.Unsent),
	// where every entry was a key in Badger until stored. Nothing moves, but a tallyd of
	// layout 4 would find no outbox to send again after a crash.
	LayoutOutboxInLog = 5
	// LayoutWindowedCounts: a counter partition keeps an id's counters with its window
	// record while it has one, under the record's key (w|…|'v'|id), and its counter key
	// only when it has none (store/checkpoint's windows.go), where layout 5 kept the
	// record alone (w|…|'m'|id) beside the counters. The records move as a partition
	// loads them (checkpoint.MoveRecords); a tallyd of layout 5 would read the stale
	// counters the counter key keeps while a record holds the id's.
	LayoutWindowedCounts = 6
	// Layout is the layout this code writes, and the newest it reads.
	Layout = LayoutWindowedCounts
)

// An Upgrade moves the keys of event partitions events, just restored from a backup of
// layout from, to Layout, and returns how many keys it moved (graph.Upgrade). Restore
// calls it, before it writes the restored marks, for a backup of an older layout.
type Upgrade func(db *DB, events []int, from int) (int, error)

// layoutKey holds the layout a database is in (none before Migrate first recorded it).
func layoutKey() key { return newKey(keys.NSLayout, 7).Bytes([]byte("layout")) }

// RecordedLayout is the layout the database records, 0 when it records none.
func (d *DB) RecordedLayout() (int, error) {
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

// RecordLayout records that the database is in Layout: graph.Migrate calls it once
// every key is moved.
func (d *DB) RecordLayout() error {
	return d.Update(func(txn *Txn) error {
		return txn.Set(layoutKey(), binary.AppendUvarint(nil, Layout))
	})
}
