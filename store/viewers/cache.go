package viewers

import "github.com/tally-dev/tally/store/sketch"

// Cache is the sketches of the posts an event partition's views touched lately, kept in
// RAM up to a budget of bytes. Past it, it forgets posts at random (a map's order), an
// eighth of its bytes at a time: a post viewed again is read from the database once. A
// Cache is not safe for concurrent use; a nil Cache keeps nothing.
type Cache struct {
	max, bytes int
	posts      map[uint64]*sketch.Sketch
}

// sketchOverhead is the RAM of a cached sketch beside its bytes: the Sketch, its map
// entry.
const sketchOverhead = 112

// NewCache keeps up to maxBytes of sketches (none when maxBytes is 0).
func NewCache(maxBytes int) *Cache {
	return &Cache{max: maxBytes, posts: map[uint64]*sketch.Sketch{}}
}

func (c *Cache) get(p uint64) (*sketch.Sketch, bool) {
	if c == nil {
		return nil, false
	}
	s, ok := c.posts[p]
	return s, ok
}

// Bytes is the RAM the cached sketches take, as the budget counts it.
func (c *Cache) Bytes() int {
	if c == nil {
		return 0
	}
	return c.bytes
}

// Keep takes in the sketches of v's transaction once it has committed.
func (c *Cache) Keep(v *Viewers) {
	if c == nil || c.max == 0 || v == nil {
		return
	}
	for p, ps := range v.posts {
		if old, ok := c.posts[p]; ok {
			c.bytes -= old.Size() + sketchOverhead
		}
		c.posts[p] = &ps.s // the transaction is over: its copy is the partition's now
		c.bytes += ps.s.Size() + sketchOverhead
	}
	for c.bytes > c.max {
		target := c.max - c.max/8
		for p, s := range c.posts {
			if c.bytes <= target {
				break
			}
			c.bytes -= s.Size() + sketchOverhead
			delete(c.posts, p)
		}
	}
}
