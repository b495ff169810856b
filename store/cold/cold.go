package cold

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"

	"github.com/tally-dev/tally/store/internal/keys"
)

// Options configure the Badger database.
type Options struct {
	Dir string
	// SyncWrites fsyncs every commit: needed for exactness across power loss, not across
	// process crashes (kill -9 leaves committed writes in the page cache).
	SyncWrites bool
	Logger     *slog.Logger
	// MemTableSize is Badger's memtable size (32 MiB when 0). It also bounds one
	// transaction (Badger takes 15 % of it); tests make it small to reach that bound.
	MemTableSize int64
	// The RAM Badger takes beside its memtables, each Badger's default when 0 (see
	// node.SplitMem for how tallyd sizes them from its --max-mem):
	//
	//   - NumMemtables is how many memtables may be in RAM at once, the one written and
	//     those waiting to be flushed (5); each costs ~1.3 MemTableSize of heap.
	//   - BlockCacheSize bounds the decompressed blocks of tables kept for reads (256 MiB),
	//     with Snappy only.
	//   - IndexCacheSize bounds the tables' indexes and Bloom filters kept in RAM; 0 keeps
	//     every table's, which grows with the data on disk.
	//   - NumCompactors is how many compactions run at once (4), each building tables
	//     in RAM before writing them; at least 2.
	NumMemtables   int
	BlockCacheSize int64
	IndexCacheSize int64
	NumCompactors  int
	// Snappy compresses the blocks of the tables it writes, Badger's default. Off, they
	// take ~45 % more disk, but a table build holds no compressed copy of its blocks
	// (under half the heap of a memtable flush or a compaction), reads use the mapped table as
	// it is, and no block cache is kept (BlockCacheSize is not used). Tables written
	// either way are read either way: each records its own compression.
	Snappy bool
	// Upgrade moves a restored backup of an older layout to this one (graph.Upgrade);
	// a database opened without it refuses to restore one.
	Upgrade Upgrade

	levelZero int // Badger's NumLevelZeroTables (its default, 5, when 0): for benchmarks
}

// DB is Tally's Badger database.
type DB struct {
	db      *badger.DB
	log     *slog.Logger
	upgrade Upgrade
	lim     limits // of one transaction (Txn.FillWith)
}

// Open opens or creates the database in o.Dir.
func Open(o Options) (*DB, error) {
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("cannot create data dir %s: %w", o.Dir, err)
	}
	// A memtable file Badger could not size (a full disk) is left empty, and so is the
	// value log file Badger creates at every open when the process is killed just then
	// (TestCrashKill9 hit it); an empty one of either stops Badger from opening ("Open
	// existing file …: Create a new file"), and it never held a write.
	mems, _ := filepath.Glob(filepath.Join(o.Dir, "*.mem"))
	vlogs, _ := filepath.Glob(filepath.Join(o.Dir, "*.vlog"))
	for _, m := range append(mems, vlogs...) {
		if fi, err := os.Stat(m); err == nil && fi.Size() == 0 {
			if err := os.Remove(m); err != nil {
				return nil, fmt.Errorf("cannot remove the empty file %s: %w", m, err)
			}
		}
	}
	if o.MemTableSize <= 0 {
		o.MemTableSize = 32 << 20
	}
	valueThreshold := min(1<<20, o.MemTableSize/16) // Badger refuses one above its largest transaction
	bo := badger.DefaultOptions(o.Dir).
		WithSyncWrites(o.SyncWrites).
		WithLogger(badgerLogger{o.Logger}).
		WithMemTableSize(o.MemTableSize).
		WithValueThreshold(valueThreshold).
		WithNumVersionsToKeep(1).
		// Each key has one writer goroutine (its partition), so transactions never conflict;
		// tracking their reads for conflict detection would be pure cost.
		WithDetectConflicts(false).
		// Counted instead, once a transaction (Counts).
		WithMetricsEnabled(false)
	if o.NumMemtables > 0 {
		bo = bo.WithNumMemtables(o.NumMemtables)
	}
	switch {
	case !o.Snappy:
		// Blocks are read from the mapped tables in place: a cache would only add its
		// own cost. A table still compressed (written before) decompresses its block at
		// each read until a compaction rewrites it.
		bo = bo.WithCompression(options.None).WithBlockCacheSize(0)
	case o.BlockCacheSize > 0:
		bo = bo.WithBlockCacheSize(o.BlockCacheSize)
	}
	if o.IndexCacheSize > 0 {
		bo = bo.WithIndexCacheSize(o.IndexCacheSize)
	}
	if o.NumCompactors > 0 {
		bo = bo.WithNumCompactors(max(o.NumCompactors, 2)) // Badger refuses 1
	}
	if o.levelZero > 0 {
		bo = bo.WithNumLevelZeroTables(o.levelZero).WithNumLevelZeroTablesStall(o.levelZero + 10)
	}
	db, err := badger.Open(bo)
	if err != nil {
		return nil, fmt.Errorf("cannot open Badger in %s: %w", o.Dir, err)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &DB{db: db, log: o.Logger, upgrade: o.Upgrade, lim: newLimits(o.MemTableSize, valueThreshold)}, nil
}

// Options are the options the database runs with: those it was opened with, and
// Badger's defaults for those left 0.
func (d *DB) Options() Options {
	bo := d.db.Opts()
	return Options{
		Dir: bo.Dir, SyncWrites: bo.SyncWrites, Logger: d.log, MemTableSize: bo.MemTableSize,
		NumMemtables: bo.NumMemtables, BlockCacheSize: bo.BlockCacheSize,
		IndexCacheSize: bo.IndexCacheSize, NumCompactors: bo.NumCompactors, Snappy: bo.Compression == options.Snappy,
		Upgrade: d.upgrade,
	}
}

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

// backupMagic starts a backup: then the layout its keys are in (a uvarint), every key and
// value, each a uvarint length and the bytes, then the length of all that after the magic
// (8 bytes) and its CRC-32C (4 bytes), big-endian. A backup is checked whole before
// anything is loaded, and the loader checks every length, so a damaged one is an error,
// never a half-loaded database. Backups of backupMagicV2 have no layout: they were
// written before layouts were recorded (LayoutPartitioned or LayoutLikes), and versions
// that wrote them refuse backupMagic ones as without Tally's header.
// Badger's own Backup is not used: without managed transactions it reads key ranges in
// separate transactions, at different moments — counters from one and the checkpoint
// saying what they reflect from another — which is not a state to restart from.
const (
	backupMagic   = "TLYB3"
	backupMagicV2 = "TLYB2"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Keys are a set of keys that move between processes as one: one partition's state
// (PartitionKeys), its event stage's (EventKeys) or its counters' (CounterKeys). The
// store packages that write them name them in store/internal/keys.
type Keys struct {
	prefixes []key
	// marks are the keys that say what the set reflects (a stage's position, a
	// family's checkpoint): a restore writes them last and a clear deletes them first,
	// so a set that has them is whole, whenever a process stopped restoring it.
	marks []key
	// events are the event-stage partitions of the set: what a restore of an older
	// layout moves (see Upgrade).
	events []int
}

// EventKeys are everything partition p's event stage keeps: relations and likes, its
// position and outbox, readers, posts, pushed and pulled posts and system notices. Every
// one of those keys starts with its namespace and p.
func EventKeys(p int) Keys {
	var ps []key
	for _, ns := range append(append(keys.Graph(), keys.NSStage, keys.NSOutbox, keys.NSViewers), keys.Unread()...) {
		ps = append(ps, newKey(ns, 3).U16(p))
	}
	return Keys{prefixes: ps, marks: []key{keys.Stage(p)}, events: []int{p}}
}

// CounterKeys are partition p of each family: its counters, checkpoint and journal; under
// the checkpoint's key, its change outbox and the payloads of the delta batches it holds.
func CounterKeys(families []string, p int) Keys {
	var ps, marks []key
	for _, f := range families {
		ps = append(ps, keys.Counters(f, p), keys.Meta(f, p), keys.Journal(f, p))
		marks = append(marks, keys.Meta(f, p))
	}
	return Keys{prefixes: ps, marks: marks}
}

// PartitionKeys are partition p whole: its event stage and its counters of every family,
// which one process owns together.
func PartitionKeys(families []string, p int) Keys {
	e, c := EventKeys(p), CounterKeys(families, p)
	return Keys{prefixes: append(e.prefixes, c.prefixes...), marks: append(e.marks, c.marks...), events: e.events}
}

func (ks Keys) has(k []byte) bool {
	for _, p := range ks.prefixes {
		if bytes.HasPrefix(k, p) {
			return true
		}
	}
	return false
}

// mark reports whether k is one of the marks.
func (ks Keys) mark(k []byte) bool {
	for _, m := range ks.marks {
		if bytes.Equal(k, m) {
			return true
		}
	}
	return false
}

// Backup writes a consistent copy of ks to w: one read transaction.
func (d *DB) Backup(w io.Writer, ks Keys) error {
	if _, err := io.WriteString(w, backupMagic); err != nil {
		return err
	}
	cw := &crcWriter{w: w, crc: crc32.New(castagnoli)}
	bw := bufio.NewWriterSize(cw, 1<<20)
	if _, err := bw.Write(binary.AppendUvarint(nil, Layout)); err != nil {
		return err
	}
	err := d.View(func(txn *Txn) error {
		var buf []byte
		for _, prefix := range ks.prefixes {
			it := txn.Iterator(IteratorOptions{Prefix: prefix, PrefetchValues: true, PrefetchSize: 256})
			for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
				buf = binary.AppendUvarint(buf[:0], uint64(len(it.Key())))
				buf = append(buf, it.Key()...)
				v, err := it.ValueCopy(nil)
				if err == nil {
					buf = binary.AppendUvarint(buf, uint64(len(v)))
					_, err = bw.Write(append(buf, v...))
				}
				if err != nil {
					it.Close()
					return err
				}
			}
			it.Close()
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

// Restore replaces keys ks of the database with a backup of them read from r. The backup
// is first copied to a file in tmpDir and checked (length, checksum, layout, every key
// in ks); only then is what the database holds of ks deleted and the backup loaded.
// Keys outside ks are not touched, and may be written meanwhile (another partition's).
// A backup of an older layout is moved to this one before the marks of ks are written,
// in transactions that fit; one of a newer layout is refused (ErrNewerLayout). A restore
// stopped halfway (a crash) leaves ks without their marks: what they reflect reads as
// nothing, and they are restored again.
func (d *DB) Restore(r io.Reader, ks Keys, tmpDir string) error {
	return d.RestoreReplacing(r, ks, tmpDir, nil)
}

// RestoreReplacing is Restore calling replacing, when not nil, once the backup has passed
// every check and before the first key of ks is deleted: what the caller keeps beside
// the keys (a snapshot of them) goes only when they are about to change, not for a
// backup then refused.
func (d *DB) RestoreReplacing(r io.Reader, ks Keys, tmpDir string, replacing func()) error {
	tmp, err := os.CreateTemp(tmpDir, "restore-*")
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
	if _, err := tmp.ReadAt(buf, 0); err != nil || (string(buf) != backupMagic && string(buf) != backupMagicV2) {
		return bad("without Tally's header")
	}
	magic := string(buf)
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
	// The keys and values come after the layout, which a backup of format 2 has not.
	layout, body := uint64(LayoutPartitioned), head
	if magic != backupMagicV2 {
		var v [binary.MaxVarintLen64]byte
		got, _ := tmp.ReadAt(v[:min(len(v), int(size))], head)
		l, k := binary.Uvarint(v[:got])
		if k <= 0 {
			return bad("without its layout")
		}
		layout, body = l, head+int64(k)
	}
	scan := func(fn func(k, v []byte) error) error {
		return scanBackup(bufio.NewReaderSize(io.NewSectionReader(tmp, body, n-tail-body), 1<<20), fn)
	}
	if layout > Layout {
		return fmt.Errorf("%w: the backup is of layout %d, this tallyd knows layouts up to %d: a tallyd of layout %d or newer must take it", ErrNewerLayout, layout, Layout, layout)
	}
	if layout < Layout && len(ks.events) > 0 && d.upgrade == nil {
		return fmt.Errorf("cannot move a backup of layout %d to layout %d: the database was opened without Options.Upgrade", layout, Layout)
	}
	if err := scan(func(k, _ []byte) error {
		if !ks.has(k) {
			return bad("with a key of another part")
		}
		return nil
	}); err != nil {
		return err
	}
	if replacing != nil {
		replacing()
	}
	if err := d.Clear(ks); err != nil {
		return fmt.Errorf("cannot clear the part to restore: %w", err)
	}
	// The marks are held back (a key per stage or family, holding what it keeps above a
	// gap) and written once the rest is in.
	var marks [][2][]byte
	wb := d.NewBatch()
	defer wb.Cancel()
	err = scan(func(k, v []byte) error {
		if ks.mark(k) {
			marks = append(marks, [2][]byte{k, v})
			return nil
		}
		return wb.Set(k, v)
	})
	if err == nil {
		err = wb.Flush()
	}
	if err != nil {
		return fmt.Errorf("cannot restore the backup: %w", err)
	}
	if layout < Layout && len(ks.events) > 0 {
		start := time.Now()
		moved, err := d.upgrade(d, ks.events, int(layout))
		if err != nil {
			return fmt.Errorf("cannot move a backup of layout %d to layout %d: %w", layout, Layout, err)
		}
		d.log.Info("restored a backup of an older layout and moved it to this one", "from", layout, "to", Layout, "keys", moved, "took", time.Since(start))
	}
	// The marks in one transaction: keys that have any have them all.
	err = d.Update(func(txn *Txn) error {
		for _, m := range marks {
			if err := txn.Set(m[0], m[1]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("cannot restore the backup: %w", err)
	}
	return nil
}

// Clear deletes every key of ks: deletes rather than Badger's DropPrefix, which
// blocks every other writer of the database (the partitions still running) meanwhile.
// The marks go first, so keys cleared halfway reflect nothing.
func (d *DB) Clear(ks Keys) error {
	if err := d.Update(func(txn *Txn) error {
		for _, m := range ks.marks {
			if err := txn.Delete(m); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return err
	}
	wb := d.NewBatch()
	defer wb.Cancel()
	err := d.View(func(txn *Txn) error {
		for _, prefix := range ks.prefixes {
			it := txn.Iterator(IteratorOptions{Prefix: prefix})
			for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
				if err := wb.Delete(it.KeyCopy(nil)); err != nil {
					it.Close()
					return err
				}
			}
			it.Close()
		}
		return nil
	})
	if err != nil {
		return err
	}
	return wb.Flush()
}

// scanBackup calls fn with each key and value of a checked backup.
func scanBackup(r *bufio.Reader, fn func(k, v []byte) error) error {
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
			return nil
		}
		if err != nil {
			return err
		}
		v, err := field()
		if err != nil {
			return fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
		if err := fn(k, v); err != nil {
			return err
		}
	}
}
