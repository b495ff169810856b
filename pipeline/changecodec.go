package pipeline

import "github.com/vmihailenco/msgpack/v5"

// EncodeMsgpack writes c as reflection did (a map of its non-empty fields, ids compact,
// counts as full uint64s), without reflection: a checkpoint announces every id it wrote.
func (c *Change) EncodeMsgpack(enc *msgpack.Encoder) error {
	n := 0
	for _, full := range [...]bool{len(c.IDs) > 0, len(c.Fields) > 0, len(c.Counts) > 0} {
		if full {
			n++
		}
	}
	if err := enc.EncodeMapLen(n); err != nil {
		return err
	}
	if len(c.IDs) > 0 {
		if err := encodeKeyLen(enc, "ids", len(c.IDs)); err != nil {
			return err
		}
		for _, id := range c.IDs {
			if err := enc.EncodeUint(uint64(id)); err != nil {
				return err
			}
		}
	}
	if len(c.Fields) > 0 {
		if err := encodeKeyLen(enc, "fields", len(c.Fields)); err != nil {
			return err
		}
		for _, f := range c.Fields {
			if err := enc.EncodeString(f); err != nil {
				return err
			}
		}
	}
	if len(c.Counts) == 0 {
		return nil
	}
	if err := encodeKeyLen(enc, "counts", len(c.Counts)); err != nil {
		return err
	}
	for _, row := range c.Counts {
		if row == nil {
			if err := enc.EncodeNil(); err != nil {
				return err
			}
			continue
		}
		if err := enc.EncodeArrayLen(len(row)); err != nil {
			return err
		}
		for _, v := range row {
			if err := enc.EncodeUint64(v); err != nil {
				return err
			}
		}
	}
	return nil
}

// encodeKeyLen writes a map key and the length of the array that is its value.
func encodeKeyLen(enc *msgpack.Encoder, key string, n int) error {
	if err := enc.EncodeString(key); err != nil {
		return err
	}
	return enc.EncodeArrayLen(n)
}
