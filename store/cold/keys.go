package cold

import "encoding/binary"

// key builds keys from a namespace byte and big-endian fields.
type key []byte

func newKey(ns byte, capacity int) key { return append(make(key, 0, capacity), ns) }

func (k key) u8(v byte) key    { return append(k, v) }
func (k key) u16(v int) key    { return binary.BigEndian.AppendUint16(k, uint16(v)) }
func (k key) u32(v uint32) key { return binary.BigEndian.AppendUint32(k, v) }
func (k key) u64(v uint64) key { return binary.BigEndian.AppendUint64(k, v) }
func (k key) str(s string) key { return append(append(k, byte(len(s))), s...) }

func u32at(b []byte, off int) uint32 { return binary.BigEndian.Uint32(b[off:]) }
func u64at(b []byte, off int) uint64 { return binary.BigEndian.Uint64(b[off:]) }

func (k key) bytes(b []byte) key { return append(k, b...) }
