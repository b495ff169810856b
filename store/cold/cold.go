package cold

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
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

// backupMagic starts a backup: then every key and value, each a uvarint length and the
// bytes, then the length of all that (8 bytes) and its CRC-32C (4 bytes), big-endian.
// A backup is checked whole before anything is loaded, and the loader checks every
// length, so a damaged one is an error, never a half-loaded database.
// Badger's own Backup is not used: without managed transactions it reads key ranges in
// separate transactions, at different moments — counters from one and the checkpoint
// saying what they reflect from another — which is not a state to restart from.
const backupMagic = "TLYB2"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Backup writes a consistent copy of the whole database to w: one read transaction.
func (d *DB) Backup(w io.Writer) error {
	if _, err := io.WriteString(w, backupMagic); err != nil {
		return err
	}
	cw := &crcWriter{w: w, crc: crc32.New(castagnoli)}
	bw := bufio.NewWriterSize(cw, 1<<20)
	err := d.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: true, PrefetchSize: 256})
		defer it.Close()
		var buf []byte
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			buf = binary.AppendUvarint(buf[:0], uint64(len(item.Key())))
			buf = append(buf, item.Key()...)
			v, err := item.ValueCopy(nil)
			if err != nil {
				return err
			}
			buf = binary.AppendUvarint(buf, uint64(len(v)))
			if _, err := bw.Write(append(buf, v...)); err != nil {
				return err
			}
		}
		return bw.Flush()
	})
	if err != nil {
		return err
	}
	trailer := binary.BigEndian.AppendUint64(nil, cw.n)
	_, err = w.Write(binary.BigEndian.AppendUint32(trailer, cw.crc.Sum32()))
	return err
}

type crcWriter struct {
	w   io.Writer
	crc hash.Hash32
	n   uint64
}

func (c *crcWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.crc.Write(p[:n])
	c.n += uint64(n)
	return n, err
}

// Restore replaces the database in dir with a backup read from r. The backup is first
// copied next to dir and checked (length, checksum); what was in dir is removed only
// then, and a load that fails leaves dir removed, never half-loaded under its name.
func Restore(dir string, r io.Reader, log *slog.Logger) error {
	tmp, err := os.CreateTemp(filepath.Dir(dir), "restore-*")
	if err != nil {
		return fmt.Errorf("cannot stage the backup: %w", err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	n, err := io.Copy(tmp, r)
	if err != nil {
		return fmt.Errorf("cannot read the backup: %w", err)
	}
	bad := func(why string) error { return fmt.Errorf("%w: backup %s", ErrCorrupt, why) }
	const head, tail = int64(len(backupMagic)), 12
	if n < head+tail {
		return bad("too short")
	}
	buf := make([]byte, head)
	if _, err := tmp.ReadAt(buf, 0); err != nil || string(buf) != backupMagic {
		return bad("without Tally's header")
	}
	trailer := make([]byte, tail)
	if _, err := tmp.ReadAt(trailer, n-tail); err != nil {
		return err
	}
	size := binary.BigEndian.Uint64(trailer)
	if size != uint64(n-head-tail) {
		return bad("truncated")
	}
	crc := crc32.New(castagnoli)
	if _, err := io.Copy(crc, io.NewSectionReader(tmp, head, int64(size))); err != nil {
		return err
	}
	if crc.Sum32() != binary.BigEndian.Uint32(trailer[8:]) {
		return bad("checksum mismatch")
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("cannot clear %s for the restore: %w", dir, err)
	}
	db, err := Open(Options{Dir: dir, Logger: log})
	if err != nil {
		return err
	}
	if err := load(db, bufio.NewReaderSize(io.NewSectionReader(tmp, head, int64(size)), 1<<20)); err != nil {
		db.Close()
		os.RemoveAll(dir)
		return fmt.Errorf("cannot restore the backup: %w", err)
	}
	return db.Close()
}

// load writes the keys and values of a checked backup.
func load(db *DB, r *bufio.Reader) error {
	wb := db.db.NewWriteBatch()
	defer wb.Cancel()
	field := func() ([]byte, error) {
		n, err := binary.ReadUvarint(r)
		if err != nil {
			return nil, err
		}
		if n > 1<<30 {
			return nil, fmt.Errorf("%w: a field of %d bytes", ErrCorrupt, n)
		}
		b := make([]byte, n)
		_, err = io.ReadFull(r, b)
		return b, err
	}
	for {
		k, err := field()
		if errors.Is(err, io.EOF) {
			return wb.Flush()
		}
		if err != nil {
			return err
		}
		v, err := field()
		if err != nil {
			return fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
		if err := wb.Set(k, v); err != nil {
			return err
		}
	}
}
