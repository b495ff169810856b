package hot

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// Snapshot format, version 1, all integers uvarint unless noted:
//
//	"TLYH" version(byte) fields buckets
//	per bucket: key(4 bytes BE) entries, then per entry: suffix(4 bytes BE) counters…
//	crc32 (IEEE, 4 bytes BE) of everything before it
//
// Only live entries are written, with their exact values (overflow included), so a
// snapshot is about as small as the data and loads into right-sized buckets.
const (
	magic          = "TLYH"
	version        = 1
	maxSnapshotIDs = 1 << 34
)

// ErrSnapshot wraps every problem with a snapshot's bytes.
var ErrSnapshot = errors.New("bad hot table snapshot")

// WriteTo writes a snapshot of the table.
func (t *Table) WriteTo(w io.Writer) (int64, error) {
	cw := &countWriter{w: w, crc: crc32.NewIEEE()}
	bw := bufio.NewWriter(cw)
	var buf [binary.MaxVarintLen64 + 4]byte
	uv := func(v uint64) { bw.Write(binary.AppendUvarint(buf[:0], v)) }
	u32 := func(v uint32) { bw.Write(binary.BigEndian.AppendUint32(buf[:0], v)) }
	bw.WriteString(magic)
	bw.WriteByte(version)
	uv(uint64(t.fields))
	bks := t.Buckets()
	uv(uint64(len(bks)))
	for _, bk := range bks {
		u32(bk)
		uv(uint64(t.bucketLen(bk)))
		t.RangeBucket(bk, func(id uint64, counts []uint64) bool {
			u32(uint32(id))
			for _, v := range counts {
				uv(v)
			}
			return true
		})
	}
	if err := bw.Flush(); err != nil {
		return cw.n, err
	}
	sum := cw.crc.Sum32()
	_, err := cw.w.Write(binary.BigEndian.AppendUint32(nil, sum))
	return cw.n + 4, err
}

type countWriter struct {
	w   io.Writer
	crc interface {
		io.Writer
		Sum32() uint32
	}
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	c.crc.Write(p[:n])
	return n, err
}

// ReadFrom replaces the table's contents with a snapshot, sealed (see Compact) and clean
// (nothing Dirty). On any error the table is left as it was and the error wraps
// ErrSnapshot, or is the reader's.
func (t *Table) ReadFrom(r io.Reader) (int64, error) {
	fresh := NewWithOptions(t.fields, t.opt)
	cr := &crcReader{r: bufio.NewReader(r), crc: crc32.NewIEEE()}
	err := fresh.load(cr)
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			err = fmt.Errorf("%w: truncated", ErrSnapshot)
		}
		return cr.n, err
	}
	*t = *fresh
	return cr.n, nil
}

func (t *Table) load(cr *crcReader) error {
	head := make([]byte, len(magic)+1)
	if _, err := io.ReadFull(cr, head); err != nil {
		return err
	}
	if string(head[:4]) != magic || head[4] != version {
		return fmt.Errorf("%w: not a version %d snapshot", ErrSnapshot, version)
	}
	fields, err := binary.ReadUvarint(cr)
	if err != nil {
		return err
	}
	if int(fields) != t.fields {
		return fmt.Errorf("%w: %d counters per id, this table has %d", ErrSnapshot, fields, t.fields)
	}
	nb, err := binary.ReadUvarint(cr)
	if err != nil {
		return err
	}
	var key [4]byte
	counts := make([]uint64, t.fields)
	total := uint64(0)
	for range nb {
		if _, err := io.ReadFull(cr, key[:]); err != nil {
			return err
		}
		bk := binary.BigEndian.Uint32(key[:])
		n, err := binary.ReadUvarint(cr)
		if err != nil {
			return err
		}
		if total += n; total > maxSnapshotIDs {
			return fmt.Errorf("%w: more than %d ids", ErrSnapshot, uint64(maxSnapshotIDs))
		}
		for range n {
			if _, err := io.ReadFull(cr, key[:]); err != nil {
				return err
			}
			nonzero := false
			for f := range counts {
				if counts[f], err = binary.ReadUvarint(cr); err != nil {
					return err
				}
				nonzero = nonzero || counts[f] != 0
			}
			if !nonzero {
				return fmt.Errorf("%w: an all-zero entry", ErrSnapshot)
			}
			t.Put(uint64(bk)<<32|uint64(binary.BigEndian.Uint32(key[:])), counts)
		}
	}
	want := cr.crc.Sum32()
	if _, err := io.ReadFull(cr.r, key[:]); err != nil {
		return err
	}
	if binary.BigEndian.Uint32(key[:]) != want {
		return fmt.Errorf("%w: checksum mismatch", ErrSnapshot)
	}
	t.Compact()
	t.ClearDirty()
	return nil
}

// crcReader checksums what it reads; the trailing checksum is read from r directly.
type crcReader struct {
	r   *bufio.Reader
	crc interface {
		io.Writer
		Sum32() uint32
	}
	n int64
}

func (c *crcReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	c.crc.Write(p[:n])
	return n, err
}

func (c *crcReader) ReadByte() (byte, error) {
	b, err := c.r.ReadByte()
	if err == nil {
		c.n++
		c.crc.Write([]byte{b})
	}
	return b, err
}
