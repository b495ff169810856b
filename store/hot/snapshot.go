package hot

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
)

// Snapshot format, version 2: the sealed groups' arrays as they are in RAM, so a load is
// a copy, not an insert per id. Integers are uvarints unless noted; arrays are
// little-endian.
//
//	"TLYH" version(byte) fields groups
//	per group, in key order: key(u32) entries words[entries*stride](u32)
//	  runs: 0 cnt[256](u8) base[16](u16) | 1 off[257](u32)
//	  overflow: n keys[n](u64) vals[n](u64)
//	crc32 (Castagnoli, 4 bytes BE) of everything before it
//
// WriteTo seals every group first (see Compact), so a snapshot holds no open bucket and no
// dead entry.
const (
	magic          = "TLYH"
	version        = 2
	maxSnapshotIDs = 1 << 34
	chunkWords     = 1 << 16 // a load allocates as data arrives, never from a header alone
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// WriteTo seals the table's groups (which changes no value and nothing Dirty reports)
// and writes a snapshot of it.
func (t *Table) WriteTo(w io.Writer) (int64, error) {
	t.Compact()
	cw := &countWriter{w: w, crc: crc32.New(castagnoli)}
	bw := bufio.NewWriterSize(cw, 1<<16)
	var buf []byte
	uv := func(v uint64) { buf = binary.AppendUvarint(buf, v) }
	flush := func() { bw.Write(buf); buf = buf[:0] }
	buf = append(buf, magic...)
	buf = append(buf, version)
	uv(uint64(t.fields))
	gks := make([]uint32, 0, len(t.groups))
	for gk := range t.groups {
		gks = append(gks, gk)
	}
	slices.Sort(gks)
	uv(uint64(len(gks)))
	for _, gk := range gks {
		g := t.groups[gk]
		buf = binary.LittleEndian.AppendUint32(buf, gk)
		uv(uint64(g.size()))
		flush()
		writeWords(bw, g.words, &buf)
		if g.cnt != nil {
			buf = append(buf, 0)
			buf = append(buf, g.cnt...)
			for _, b := range g.base {
				buf = binary.LittleEndian.AppendUint16(buf, b)
			}
		} else {
			// A fence is rebuilt at load from the run starts (see setRuns): it depends
			// on nothing but the entries, so the format need not carry it.
			buf = append(buf, 1)
			flush()
			writeWords(bw, g.runStarts(), &buf)
		}
		uv(uint64(len(g.ov.keys)))
		for _, k := range g.ov.keys {
			buf = binary.LittleEndian.AppendUint64(buf, k)
		}
		for _, v := range g.ov.vals {
			buf = binary.LittleEndian.AppendUint64(buf, v)
		}
		flush()
	}
	flush()
	if err := bw.Flush(); err != nil {
		return cw.n, err
	}
	_, err := cw.w.Write(binary.BigEndian.AppendUint32(nil, cw.crc.Sum32()))
	return cw.n + 4, err
}

// writeWords writes ws little-endian through scratch in bounded pieces.
func writeWords(w io.Writer, ws []uint32, scratch *[]byte) {
	for len(ws) > 0 {
		n := min(len(ws), chunkWords)
		b := (*scratch)[:0]
		for _, v := range ws[:n] {
			b = binary.LittleEndian.AppendUint32(b, v)
		}
		w.Write(b)
		*scratch, ws = b[:0], ws[n:]
	}
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

// ReadFrom replaces the table's contents with a snapshot, sealed and clean (nothing
// Dirty). On any error the table is left as it was and the error wraps ErrSnapshot, or
// is the reader's.
func (t *Table) ReadFrom(r io.Reader) (int64, error) {
	fresh := NewWithOptions(t.fields, t.opt)
	cr := &crcReader{r: bufio.NewReaderSize(r, 1<<16), crc: crc32.New(castagnoli)}
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
	ng, err := binary.ReadUvarint(cr)
	if err != nil {
		return err
	}
	st := strideOf(t.fields)
	var scratch []byte
	off := make([]uint32, 1<<subBits+1) // run starts, reused: setRuns keeps none of it
	total := uint64(0)
	for i := range ng {
		gk, err := readU32(cr, &scratch)
		if err != nil {
			return err
		}
		if i > 0 && gk <= t.newest>>subBits {
			return fmt.Errorf("%w: groups out of order", ErrSnapshot)
		}
		n, err := binary.ReadUvarint(cr)
		if err != nil {
			return err
		}
		if total += n; n == 0 || total > maxSnapshotIDs {
			return fmt.Errorf("%w: a group of %d ids", ErrSnapshot, n)
		}
		g := &group{stride: int32(st), live: int32(n)}
		if g.words, err = readWords(cr, int(n)*st, &scratch); err != nil {
			return err
		}
		if err := readRuns(cr, off, &scratch); err != nil {
			return err
		}
		if err := g.readOverflow(cr, &scratch); err != nil {
			return err
		}
		if err := g.check(off); err != nil {
			return err
		}
		g.setRuns(off)
		t.addGroup(gk, g)
		t.n += int(n)
		t.started, t.newest = true, gk<<subBits|g.lastSub()
	}
	want := cr.crc.Sum32()
	var sum [4]byte
	if _, err := io.ReadFull(cr.r, sum[:]); err != nil {
		return err
	}
	if binary.BigEndian.Uint32(sum[:]) != want {
		return fmt.Errorf("%w: checksum mismatch", ErrSnapshot)
	}
	return nil
}

// readRuns reads a group's run index, in either form, into off (257 words): the start of
// every bucket's run and one past the end.
func readRuns(cr *crcReader, off []uint32, scratch *[]byte) error {
	form, err := cr.ReadByte()
	if err != nil {
		return err
	}
	switch form {
	case 0:
		b, err := readBytes(cr, 1<<subBits+2*(1<<subBits)/16, scratch)
		if err != nil {
			return err
		}
		sum := uint32(0)
		for s, c := range b[:1<<subBits] {
			if s%16 == 0 && uint32(binary.LittleEndian.Uint16(b[1<<subBits+2*(s/16):])) != sum {
				return fmt.Errorf("%w: run index", ErrSnapshot)
			}
			off[s] = sum
			sum += uint32(c)
		}
		off[1<<subBits] = sum
		return nil
	case 1:
		b, err := readBytes(cr, 4*len(off), scratch)
		if err != nil {
			return err
		}
		for s := range off {
			off[s] = binary.LittleEndian.Uint32(b[4*s:])
		}
		return nil
	}
	return fmt.Errorf("%w: unknown run form %d", ErrSnapshot, form)
}

func (g *group) readOverflow(cr *crcReader, scratch *[]byte) error {
	n, err := binary.ReadUvarint(cr)
	if err != nil {
		return err
	}
	if n > uint64(g.size())*uint64(g.stride) {
		return fmt.Errorf("%w: %d overflow values for %d ids", ErrSnapshot, n, g.size())
	}
	if n == 0 {
		return nil
	}
	b, err := readBytes(cr, 16*int(n), scratch)
	if err != nil {
		return err
	}
	g.ov.keys, g.ov.vals = make([]uint64, n), make([]uint64, n)
	for i := range int(n) {
		g.ov.keys[i] = binary.LittleEndian.Uint64(b[8*i:])
		g.ov.vals[i] = binary.LittleEndian.Uint64(b[8*(int(n)+i):])
	}
	return nil
}

// check validates a loaded group and its run starts off, so that a snapshot that passes
// it can be searched without panics: runs cover the entries exactly, keys ascend within
// each run, no entry is all zeros, overflow keys ascend.
func (g *group) check(off []uint32) error {
	bad := func(what string) error { return fmt.Errorf("%w: %s", ErrSnapshot, what) }
	if off[0] != 0 || int(off[1<<subBits]) != g.size() {
		return bad("runs do not cover the group")
	}
	for s := range 1 << subBits {
		lo, hi := int(off[s]), int(off[s+1])
		if hi < lo {
			return bad("run index")
		}
		for i := lo; i < hi; i++ {
			if i > lo && g.key(i) <= g.key(i-1) {
				return bad("keys out of order")
			}
			if g.isZero(i) {
				return bad("an all-zero entry")
			}
		}
	}
	for i := 1; i < len(g.ov.keys); i++ {
		if g.ov.keys[i] <= g.ov.keys[i-1] {
			return bad("overflow out of order")
		}
	}
	return nil
}

// lastSub is the last bucket of the group that holds entries.
func (g *group) lastSub() uint32 {
	for s := 1<<subBits - 1; s > 0; s-- {
		if lo, hi := g.bounds(uint8(s)); hi > lo {
			return uint32(s)
		}
	}
	return 0
}

// readBytes reads n bytes into scratch, growing it as data arrives.
func readBytes(cr *crcReader, n int, scratch *[]byte) ([]byte, error) {
	b := (*scratch)[:0]
	for len(b) < n {
		k := min(n-len(b), 4*chunkWords)
		b = slices.Grow(b, k)
		if _, err := io.ReadFull(cr, b[len(b):len(b)+k]); err != nil {
			return nil, err
		}
		b = b[:len(b)+k]
	}
	*scratch = b
	return b, nil
}

// readWords reads n little-endian words, allocating as they arrive.
func readWords(cr *crcReader, n int, scratch *[]byte) ([]uint32, error) {
	var ws []uint32
	for len(ws) < n {
		k := min(n-len(ws), chunkWords)
		b, err := readBytes(cr, 4*k, scratch)
		if err != nil {
			return nil, err
		}
		if ws == nil && k == n {
			ws = make([]uint32, 0, n)
		}
		for i := range k {
			ws = append(ws, binary.LittleEndian.Uint32(b[4*i:]))
		}
	}
	return ws, nil
}

func readU32(cr *crcReader, scratch *[]byte) (uint32, error) {
	b, err := readBytes(cr, 4, scratch)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b), nil
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
