package graph

import (
	"bytes"
	"testing"

	"github.com/tally-dev/tally/store/internal/arena"
)

// The keys and values Flush builds in its arena are those the functions that allocate
// their own build.
func TestArenaKeysAndValues(t *testing.T) {
	var a arena.Arena
	f := func(t *testing.T, got, want []byte) {
		t.Helper()
		if !bytes.Equal(got, want) {
			t.Fatalf("got %x, want %x", got, want)
		}
	}
	rec := &likes{list: []like{{post: 9}, {post: 11}}}
	for i := range 5000 { // past a chunk
		u := uint64(i) * 0x9e3779b97f4a7c15
		k := likesKeyTo(a.Alloc(likesKeyLen), 3, u)
		v := rec.appendTo(a.Alloc(rec.size()))
		c := likersKeyTo(a.Alloc(chunkLen), 3, u, int64(i), 77)
		f(t, k, likesKey(3, u))
		f(t, v, rec.encode())
		f(t, c, likersKey(3, u, int64(i), 77))
		if cap(k) != likesKeyLen || cap(c) != chunkLen {
			t.Fatalf("a key's room runs past it: %d, %d", cap(k), cap(c))
		}
	}
}
