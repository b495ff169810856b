package arena

import (
	"bytes"
	"testing"
)

// No slice an arena hands out runs into the next, past chunks of every size; a value
// longer than the room asked for is appended elsewhere, not over the next; and chunks
// grow, so that many slices take few allocations.
func TestArena(t *testing.T) {
	var a Arena
	var all [][]byte
	for i := range 20_000 {
		n := 1 + i%97
		b := a.Alloc(n)
		if len(b) != 0 || cap(b) != n {
			t.Fatalf("Alloc(%d): len %d, cap %d", n, len(b), cap(b))
		}
		all = append(all, append(b, bytes.Repeat([]byte{byte(i)}, n)...))
	}
	for i, b := range all {
		if !bytes.Equal(b, bytes.Repeat([]byte{byte(i)}, 1+i%97)) {
			t.Fatalf("slice %d written over: %x", i, b)
		}
	}
	short, next := a.Alloc(2), a.Alloc(4)
	next = append(next, 1, 2, 3, 4)
	short = append(short, 9, 9, 9, 9, 9)
	if !bytes.Equal(next, []byte{1, 2, 3, 4}) || !bytes.Equal(short, []byte{9, 9, 9, 9, 9}) {
		t.Fatalf("a value past its room wrote over the next: %x, %x", short, next)
	}
	if allocs := testing.AllocsPerRun(10, func() {
		var a Arena
		for range 1000 {
			a.Alloc(40)
		}
	}); allocs > 8 {
		t.Errorf("%.0f allocations for 1 000 slices of 40 bytes, want at most 8", allocs)
	}
	var none *Arena
	if b := none.Alloc(3); cap(b) != 3 {
		t.Fatalf("a nil arena's slice has room for %d, want 3", cap(b))
	}
}
