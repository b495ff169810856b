package pipeline

import (
	"encoding/binary"
	"fmt"
)

// checkMsgpack walks one MessagePack value without allocating and fails if it is
// truncated, nested too deeply, or declares a container longer than the bytes left.
// The decoder allocates a container's declared length up front, so without this check
// a 20-byte payload claiming four billion elements would exhaust memory.
func checkMsgpack(data []byte) error {
	rest, err := skipMsgpack(data, 0)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return errTrailing
	}
	return nil
}

const maxMsgpackDepth = 32

func skipMsgpack(b []byte, depth int) ([]byte, error) {
	if depth > maxMsgpackDepth {
		return nil, fmt.Errorf("MessagePack nested deeper than %d", maxMsgpackDepth)
	}
	if len(b) == 0 {
		return nil, errTruncated
	}
	c, b := b[0], b[1:]
	var n, elems uint64 // n bytes of payload, elems child values
	switch {
	case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		return b, nil
	case c >= 0x80 && c <= 0x8f:
		elems = 2 * uint64(c&0x0f)
	case c >= 0x90 && c <= 0x9f:
		elems = uint64(c & 0x0f)
	case c >= 0xa0 && c <= 0xbf:
		n = uint64(c & 0x1f)
	default:
		var err error
		if b, n, elems, err = msgpackHeader(c, b); err != nil {
			return nil, err
		}
	}
	if n > uint64(len(b)) || elems > uint64(len(b)) {
		return nil, fmt.Errorf("MessagePack length %d exceeds the %d bytes left", max(n, elems), len(b))
	}
	b = b[n:]
	for range elems {
		var err error
		if b, err = skipMsgpack(b, depth+1); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// msgpackHeader reads the length fields of the multi-byte type codes.
func msgpackHeader(c byte, b []byte) (rest []byte, n, elems uint64, err error) {
	size := func(k int) (uint64, bool) {
		if len(b) < k {
			return 0, false
		}
		var v uint64
		switch k {
		case 1:
			v = uint64(b[0])
		case 2:
			v = uint64(binary.BigEndian.Uint16(b))
		case 4:
			v = uint64(binary.BigEndian.Uint32(b))
		}
		b = b[k:]
		return v, true
	}
	var ok = true
	switch c {
	case 0xcc, 0xd0:
		n = 1
	case 0xcd, 0xd1:
		n = 2
	case 0xca, 0xce, 0xd2:
		n = 4
	case 0xcb, 0xcf, 0xd3:
		n = 8
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext 1,2,4,8,16 plus the type byte
		n = 1 + 1<<(c-0xd4)
	case 0xc4, 0xd9:
		n, ok = size(1)
	case 0xc5, 0xda:
		n, ok = size(2)
	case 0xc6, 0xdb:
		n, ok = size(4)
	case 0xc7, 0xc8, 0xc9: // ext 8,16,32 plus the type byte
		n, ok = size(1 << (c - 0xc7))
		n++
	case 0xdc:
		elems, ok = size(2)
	case 0xdd:
		elems, ok = size(4)
	case 0xde:
		elems, ok = size(2)
		elems *= 2
	case 0xdf:
		elems, ok = size(4)
		elems *= 2
	default:
		return nil, 0, 0, fmt.Errorf("invalid MessagePack type byte 0x%02x", c)
	}
	if !ok {
		return nil, 0, 0, errTruncated
	}
	return b, n, elems, nil
}
