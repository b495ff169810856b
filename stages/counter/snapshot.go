package counter

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/tally-dev/tally/store/checkpoint"
)

// A snapshot file holds a partition's hot table as of one checkpoint, with the cold set
// of that moment:
//
//	"TLYS" version(2) seq(u64) id(u64) below(u32) groups(u32) group(u32)… crc32(header)
//	the table's own snapshot (see hot.Table.WriteTo)
//
// All integers big-endian. id is drawn at random for each snapshot; the checkpoint it is
// taken at and those after it name it as being written until it is durable, the next
// as durable (checkpoint.Checkpoint.Writing, Snap), and the file is loaded only with a
// state whose last checkpoint names it. Restart = snapshot + the journal
// of the checkpoints after seq (checkpoint.LoadJournal) + the deltas after the last
// checkpoint. Version 1 had no id: such a file is not loaded (every stored counter is,
// once).
const (
	snapMagic   = "TLYS"
	snapVersion = 2
)

func (w *Worker) snapshotPath() string {
	return SnapshotPath(w.cfg.SnapshotDir, w.cfg.Family.Name, w.cfg.Partition)
}

// SnapshotPath is where the worker of (family, p) keeps its snapshot in dir.
func SnapshotPath(dir, family string, p int) string {
	return filepath.Join(dir, fmt.Sprintf("%s-%d.snap", family, p))
}

// encodeSnapshot writes the table and cold set as of checkpoint seq into a buffer: it
// runs on the worker goroutine, which owns the table; the file is written elsewhere.
func (w *Worker) encodeSnapshot(seq, id uint64) (*bytes.Buffer, error) {
	var buf bytes.Buffer
	h := []byte(snapMagic)
	h = append(h, snapVersion)
	h = binary.BigEndian.AppendUint64(h, seq)
	h = binary.BigEndian.AppendUint64(h, id)
	h = binary.BigEndian.AppendUint32(h, w.cold.below)
	h = binary.BigEndian.AppendUint32(h, uint32(len(w.cold.groups)))
	for _, g := range w.cold.groups {
		h = binary.BigEndian.AppendUint32(h, g)
	}
	h = binary.BigEndian.AppendUint32(h, crc32.ChecksumIEEE(h))
	buf.Write(h)
	if _, err := w.tier.WriteTo(&buf); err != nil {
		return nil, err
	}
	return &buf, nil
}

// writeFile replaces path with data durably: a temporary file, fsync, rename, fsync of
// the directory. A crash at any point leaves the old file or the new one, never a mix.
func writeFile(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// snapping reports whether a snapshot is being written.
func (w *Worker) snapping() bool { return w.writing.id != 0 }

// snapshots reports whether the worker keeps snapshots of its table.
func (w *Worker) snapshots() bool { return w.tier != nil && w.cfg.SnapshotDir != "" }

// snapNext reports whether the checkpoint of entries, about to be saved, is to be
// followed by a snapshot, and if so draws the id that checkpoint names it by.
func (w *Worker) snapNext(entries int) (uint64, bool) {
	if !w.snapshots() || w.snapping() || !w.snapDue && w.journaled+entries <= max(w.cfg.SnapshotMin, w.table.Len()/4) {
		return 0, false
	}
	return rand.Uint64() | 1, true // never 0, which names no snapshot
}

// startSnapshot encodes snapshot id as of the checkpoint just saved, which names it as
// being written, and writes it in the background: no file is ever there before a
// checkpoint names it. The journal it covers is dropped by the first checkpoint after
// it is durable (see snapDone).
func (w *Worker) startSnapshot(id uint64) {
	start := time.Now()
	seq := w.cp.Seq
	buf, err := w.encodeSnapshot(seq, id)
	if err != nil {
		w.snapFailed(err)
		return
	}
	w.snapDue = false
	w.writing = snapResult{seq: seq, id: id}
	w.journaled = 0
	go func() {
		err := writeFile(w.snapshotPath(), buf.Bytes())
		if err == nil && w.cfg.OnSnapshot != nil {
			w.cfg.OnSnapshot(buf.Len(), time.Since(start))
		}
		w.snapDone <- snapResult{seq: seq, id: id, err: err}
	}()
}

type snapResult struct {
	seq, id uint64
	err     error
}

func (w *Worker) snapFinished(r snapResult) {
	w.writing = snapResult{}
	if r.err != nil {
		w.snapFailed(r.err)
		return
	}
	w.stats.Snapshots.Add(1)
	w.snapSeq, w.snapID = r.seq, r.id
}

// snapFailed logs a snapshot that could not be written: it costs restart time, not data
// (the journal is kept until a snapshot covers it).
func (w *Worker) snapFailed(err error) {
	w.stats.SnapshotErrs.Add(1)
	w.log.Warn("cannot write snapshot; the journal is kept", "err", err)
}

// loadSnapshot rebuilds the table from the snapshot file and the journal after it,
// reporting false (with the reason logged) when there is none or it cannot be used: the
// caller then loads every stored counter instead.
func (w *Worker) loadSnapshot(cp checkpoint.Checkpoint) bool {
	if !w.snapshots() {
		return false
	}
	f, err := os.Open(w.snapshotPath())
	if errors.Is(err, os.ErrNotExist) {
		return false
	}
	if err == nil {
		defer f.Close()
		err = w.readSnapshot(bufio.NewReaderSize(f, 1<<20), cp)
	}
	if err != nil {
		w.log.Warn("snapshot not used; loading every stored counter", "err", err)
		w.table = w.cfg.NewTable(len(w.cfg.Family.Fields))
		w.tier = w.table.(tiered)
		w.cold = coldSet{}
		return false
	}
	return true
}

func (w *Worker) readSnapshot(r io.Reader, cp checkpoint.Checkpoint) error {
	h := make([]byte, 4+1+8+8+4+4)
	if _, err := io.ReadFull(r, h); err != nil {
		return fmt.Errorf("%w: %w", errSnapshotFile, err)
	}
	if string(h[:4]) != snapMagic || h[4] != snapVersion {
		return fmt.Errorf("%w: not a version %d snapshot", errSnapshotFile, snapVersion)
	}
	seq := binary.BigEndian.Uint64(h[5:])
	id := binary.BigEndian.Uint64(h[13:])
	below := binary.BigEndian.Uint32(h[21:])
	n := binary.BigEndian.Uint32(h[25:])
	if n > 1<<24 {
		return fmt.Errorf("%w: %d cold groups", errSnapshotFile, n)
	}
	rest := make([]byte, 4*int(n)+4)
	if _, err := io.ReadFull(r, rest); err != nil {
		return fmt.Errorf("%w: %w", errSnapshotFile, err)
	}
	h = append(h, rest[:4*n]...)
	if crc32.ChecksumIEEE(h) != binary.BigEndian.Uint32(rest[4*n:]) {
		return fmt.Errorf("%w: header checksum mismatch", errSnapshotFile)
	}
	if (id != cp.Snap || seq != cp.SnapSeq) && (id != cp.Writing || seq != cp.WritingSeq) {
		return fmt.Errorf("%w: of another state: snapshot %016x taken at checkpoint %d, the state's checkpoint %d (journal from %d) names snapshot %016x of checkpoint %d (and %016x of %d being written)",
			errSnapshotFile, id, seq, cp.Seq, cp.JournalFrom, cp.Snap, cp.SnapSeq, cp.Writing, cp.WritingSeq)
	}
	if seq > cp.Seq || (seq < cp.Seq && seq+1 < cp.JournalFrom) || (seq < cp.Seq && cp.JournalFrom == 0) {
		return fmt.Errorf("%w: taken at checkpoint %d, the journal covers %d to %d", errSnapshotFile, seq, cp.JournalFrom, cp.Seq)
	}
	if _, err := w.tier.ReadFrom(r); err != nil {
		return err
	}
	w.cold = coldSet{below: below}
	for i := range int(n) {
		g := binary.BigEndian.Uint32(rest[4*i:])
		if i > 0 && g <= w.cold.groups[i-1] {
			return fmt.Errorf("%w: cold groups out of order", errSnapshotFile)
		}
		w.cold.groups = append(w.cold.groups, g)
	}
	w.journaled = 0
	last, err := checkpoint.LoadJournal(w.db, w.cfg.Family.Name, w.cfg.Partition, len(w.cfg.Family.Fields), seq, func(id uint64, counts []uint64) {
		w.table.Put(id, counts)
		w.journaled++
	})
	if err != nil {
		return err
	}
	if last != cp.Seq {
		return fmt.Errorf("%w: journal ends at checkpoint %d, the last one is %d", errSnapshotFile, last, cp.Seq)
	}
	w.snapSeq, w.snapID = seq, id
	return nil
}
