// Package arena hands out room for the keys and values a transaction sets, from chunks
// it allocates a few at a time rather than one slice each: Badger holds both until the
// transaction commits, so a chunk is never reused, only dropped with the arena once the
// transaction is done (a chunk stays alive while any of its slices does).
package arena

// Chunks grow from minChunk to maxChunk as an arena hands out more: a transaction
// that sets a few keys takes a small one, a large transaction few allocations.
const (
	minChunk = 1 << 10
	maxChunk = 64 << 10
)

// Arena is the room of one transaction's keys and values. The zero Arena is ready; a
// nil *Arena allocates each slice on its own.
type Arena struct {
	free []byte
	made int // bytes of the chunks allocated so far
}

// Alloc returns an empty slice with room for n bytes, its capacity n: appending past it
// allocates afresh rather than writing over the next slice handed out.
func (a *Arena) Alloc(n int) []byte {
	if a == nil || n > maxChunk/8 {
		return make([]byte, 0, n)
	}
	if len(a.free) < n {
		size := min(max(a.made, minChunk), maxChunk)
		a.free, a.made = make([]byte, size), a.made+size
	}
	b := a.free[:0:n]
	a.free = a.free[n:]
	return b
}
