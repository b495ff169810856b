package graph

// arena hands out room for the keys and values a batch sets, from chunks it allocates
// a few at a time rather than one slice each: Badger holds both until the transaction
// commits, so a chunk is never reused, only dropped with the arena once the batch is
// done (a chunk stays alive while any of its slices does).
type arena struct{ free []byte }

// arenaChunk is the size of one chunk: a transaction's records and chunks take a few.
const arenaChunk = 64 << 10

// alloc returns an empty slice with room for n bytes, its capacity n: appending past it
// allocates afresh rather than writing over the next slice handed out. A nil arena
// allocates each.
func (a *arena) alloc(n int) []byte {
	if a == nil || n > arenaChunk/8 {
		return make([]byte, 0, n)
	}
	if len(a.free) < n {
		a.free = make([]byte, arenaChunk)
	}
	b := a.free[:0:n]
	a.free = a.free[n:]
	return b
}
