// Package hot is Tally's packed in-RAM counter table: about 12–13 bytes per post with
// four counters, where a Go map of id → [4]uint32 takes about 45.
//
// Ids are split by time. Snowflake ids carry milliseconds in their high bits, so the ids
// of one time bucket (id >> 32, about a second) share their top 32 bits, which are stored
// once; a slot holds the low 32 bits and the counters, 16 bits each. A count that does
// not fit 16 bits is marked with an escape value and kept exactly in a small sorted
// overflow list: no count is clamped or wrapped.
//
// A bucket being written is open: an open-addressing table with double hashing over a
// power-of-two number of slots (odd steps reach every slot), in flat pointer-free arrays
// the GC never scans, with tombstones that later inserts reuse. When time moves on to the
// next group of 256 buckets (id >> 40, about 4.4 minutes) the previous group is sealed:
// its entries are merged into one dense sorted array with no empty slots, searched by
// interpolation. Sealing is what keeps sparse ids cheap: at a few posts a second a table
// per bucket would be mostly overhead. A dense group (64 ids a second or more) keeps a
// fence instead of run lengths: the start of every slice of its key space holding 32 to
// 64 ids (0.125 bytes an id at most), so that interpolating inside a slice lands on the entry or a
// neighbour and a lookup costs one cache miss, like a Go map's. Ids that arrive late for
// a sealed group wait in open buckets until enough of them make the group merge again.
//
// Groups are found through a slice indexed by group number over the range where most of
// them are (snowflake groups follow each other), the others through a map.
//
// Growth and sealing each rehash one bucket or merge one group, never the whole table,
// so no pause is proportional to the table's size.
//
// A Table is owned by one goroutine; it is not safe for concurrent use.
package hot
