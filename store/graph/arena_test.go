package graph

import (
	"bytes"
	"testing"
)

// The keys and values Flush builds in its arena are those the functions that allocate
// their own build, and no slice it hands out runs into the next.
func TestArenaKeysAndValues(t *testing.T) {
	var a arena
	f := func(t *testing.T, got, want []byte) {
		t.Helper()
		if !bytes.Equal(got, want) {
			t.Fatalf("got %x, want %x", got, want)
		}
	}
	rec := &likes{list: []like{{post: 9}, {post: 11}}}
	for i := range 5000 { // past a chunk
		u := uint64(i) * 0x9e3779b97f4a7c15
		k := likesKeyTo(a.alloc(likesKeyLen), 3, u)
		v := rec.appendTo(a.alloc(rec.size()))
		c := likersKeyTo(a.alloc(chunkLen), 3, u, int64(i), 77)
		f(t, k, likesKey(3, u))
		f(t, v, rec.encode())
		f(t, c, likersKey(3, u, int64(i), 77))
		if cap(k) != likesKeyLen || cap(c) != chunkLen {
			t.Fatalf("a key's room runs past it: %d, %d", cap(k), cap(c))
		}
	}
	// A value longer than the room asked for is appended elsewhere, not over the next.
	short := a.alloc(2)
	next := a.alloc(4)
	next = append(next, 1, 2, 3, 4)
	short = append(short, 9, 9, 9, 9, 9)
	f(t, next, []byte{1, 2, 3, 4})
	f(t, short, []byte{9, 9, 9, 9, 9})
}
