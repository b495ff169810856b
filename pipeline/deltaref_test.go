package pipeline

// The delta batch codec through msgpack.Encoder and msgpack.Decoder, as it was before
// AppendDeltaBatch and DecodeDeltaBatch wrote and read the bytes themselves: the
// reference they are tested against (TestDeltaBatchCodecs, FuzzDeltaBatchCodecs).

import (
	"bytes"
	"fmt"
	"math"

	"github.com/vmihailenco/msgpack/v5"
)

// encoderDeltaBatch is AppendDeltaBatch through msgpack.Encoder, as before.
func encoderDeltaBatch(dst []byte, b *DeltaBatch) []byte {
	buf := bytes.NewBuffer(dst)
	e := msgpack.NewEncoder(buf)
	if len(b.Windows) > 0 {
		_ = e.EncodeArrayLen(4)
	} else {
		_ = e.EncodeArrayLen(3)
	}
	_ = e.EncodeUint(uint64(b.Source))
	_ = e.EncodeUint(b.Seq)
	_ = e.EncodeArrayLen(4 * len(b.Deltas))
	for _, d := range b.Deltas {
		_ = e.EncodeUint(d.ID)
		_ = e.EncodeUint(uint64(d.Field))
		_ = e.EncodeUint(uint64(d.Op))
		_ = e.EncodeInt(d.N)
	}
	if len(b.Windows) > 0 {
		_ = e.EncodeArrayLen(4 * len(b.Windows))
		for _, w := range b.Windows {
			_ = e.EncodeUint(w.ID)
			_ = e.EncodeUint(uint64(w.Field))
			_ = e.EncodeUint(uint64(w.Minute))
			_ = e.EncodeInt(w.N)
		}
	}
	return buf.Bytes()
}

// decoderDeltaBatch is DecodeDeltaBatch through msgpack.Decoder, as before.
func decoderDeltaBatch(data []byte, b *DeltaBatch) error {
	if err := checkMsgpack(data); err != nil {
		return fmt.Errorf("delta batch: %w", err)
	}
	d := msgpack.NewDecoder(bytes.NewReader(data))
	n, err := d.DecodeArrayLen()
	if err != nil || (n != 3 && n != 4) {
		return fmt.Errorf("delta batch: want a 3- or 4-element array (len %d): %v", n, err)
	}
	parts := n
	src, err := d.DecodeUint32()
	if err != nil {
		return fmt.Errorf("delta batch source: %w", err)
	}
	if b.Seq, err = d.DecodeUint64(); err != nil {
		return fmt.Errorf("delta batch seq: %w", err)
	}
	b.Source = src
	if n, err = d.DecodeArrayLen(); err != nil || n < 0 || n%4 != 0 || n > len(data) {
		return fmt.Errorf("delta batch: bad delta list (len %d): %v", n, err)
	}
	b.Deltas = b.Deltas[:0]
	for range n / 4 {
		var x Delta
		var f, op uint64
		if x.ID, err = d.DecodeUint64(); err == nil {
			if f, err = d.DecodeUint64(); err == nil {
				if op, err = d.DecodeUint64(); err == nil {
					x.N, err = d.DecodeInt64()
				}
			}
		}
		if err != nil {
			return fmt.Errorf("delta batch: %w", err)
		}
		if f > 255 || op > uint64(OpSet) {
			return fmt.Errorf("delta batch: field %d or op %d out of range", f, op)
		}
		x.Field, x.Op = uint8(f), Op(op)
		b.Deltas = append(b.Deltas, x)
	}
	b.Windows = b.Windows[:0]
	if parts == 4 {
		return decoderWindows(d, len(data), b)
	}
	return nil
}

func decoderWindows(d *msgpack.Decoder, size int, b *DeltaBatch) error {
	n, err := d.DecodeArrayLen()
	if err != nil || n < 0 || n%4 != 0 || n > size {
		return fmt.Errorf("delta batch: bad window list (len %d): %v", n, err)
	}
	for range n / 4 {
		var x WindowDelta
		var f, m uint64
		if x.ID, err = d.DecodeUint64(); err == nil {
			if f, err = d.DecodeUint64(); err == nil {
				if m, err = d.DecodeUint64(); err == nil {
					x.N, err = d.DecodeInt64()
				}
			}
		}
		if err != nil {
			return fmt.Errorf("delta batch windows: %w", err)
		}
		if f > 255 || m > math.MaxUint32 {
			return fmt.Errorf("delta batch windows: field %d or minute %d out of range", f, m)
		}
		x.Field, x.Minute = uint8(f), uint32(m)
		b.Windows = append(b.Windows, x)
	}
	return nil
}
