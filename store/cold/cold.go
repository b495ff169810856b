package cold

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/dgraph-io/badger/v4"
)

// ErrCorrupt wraps a stored value that cannot be decoded.
var ErrCorrupt = errors.New("corrupt stored value")

// Key namespaces, the first byte of every key.
const (
	nsRelation  = 'r'
	nsBySubject = 's'
	nsByObject  = 'o'
	nsStage     = 'p'
	nsOutbox    = 'x'
	nsCounter   = 'c'
	nsMeta      = 'w'
	nsJournal   = 'j' // j|family|p|checkpoint → the checkpoint's entries, packed
)

// Options configure the Badger database.
type Options struct {
	Dir string
	// SyncWrites fsyncs every commit: needed for exactness across power loss, not across
	// process crashes (kill -9 leaves committed writes in the page cache).
	SyncWrites bool
	Logger     *slog.Logger
}

// DB is Tally's Badger database.
type DB struct {
	db *badger.DB
}

// Open opens or creates the database in o.Dir.
func Open(o Options) (*DB, error) {
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("cannot create data dir %s: %w", o.Dir, err)
	}
	// A memtable file Badger could not size (a full disk) is left empty, and an empty
	// memtable file stops Badger from opening; it never held a write.
	mems, _ := filepath.Glob(filepath.Join(o.Dir, "*.mem"))
	for _, m := range mems {
		if fi, err := os.Stat(m); err == nil && fi.Size() == 0 {
			if err := os.Remove(m); err != nil {
				return nil, fmt.Errorf("cannot remove the empty memtable %s: %w", m, err)
			}
		}
	}
	bo := badger.DefaultOptions(o.Dir).
		WithSyncWrites(o.SyncWrites).
		WithLogger(badgerLogger{o.Logger}).
		WithMemTableSize(32 << 20).
		WithNumVersionsToKeep(1).
		// Each key has one writer goroutine (its partition), so transactions never conflict;
		// tracking their reads for conflict detection would be pure cost.
		WithDetectConflicts(false)
	db, err := badger.Open(bo)
	if err != nil {
		return nil, fmt.Errorf("cannot open Badger in %s: %w", o.Dir, err)
	}
	return &DB{db: db}, nil
}

// Badger returns the underlying database for transactions.
func (d *DB) Badger() *badger.DB { return d.db }

// Size is the bytes the database takes on disk: its LSM tree and its value log.
func (d *DB) Size() (lsm, vlog int64) { return d.db.Size() }

// Close flushes and closes the database.
func (d *DB) Close() error { return d.db.Close() }

// badgerLogger forwards Badger's warnings and errors to slog and drops its chatter.
type badgerLogger struct{ l *slog.Logger }

func (b badgerLogger) Errorf(f string, a ...any) {
	if b.l != nil {
		b.l.Error("badger: " + fmt.Sprintf(f, a...))
	}
}
func (b badgerLogger) Warningf(f string, a ...any) {
	if b.l != nil {
		b.l.Warn("badger: " + fmt.Sprintf(f, a...))
	}
}
func (badgerLogger) Infof(string, ...any)  {}
func (badgerLogger) Debugf(string, ...any) {}
