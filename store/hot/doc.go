// Package hot is Tally's packed in-RAM counter table: about 13 bytes per post with four
// counters, where a Go map of id → [4]uint32 takes 40–60.
//
// Ids are split by time: snowflake ids carry milliseconds in their high bits, so the ids
// of one bucket (id >> 32, about a second) share their top 32 bits, which are stored once
// per bucket; a slot holds the low 32 bits and the counters, 16 bits each. A count that
// does not fit 16 bits is marked with an escape value and kept exactly in a small
// overflow map: no count is clamped or wrapped. Each bucket is an open-addressing table
// with double hashing over a prime number of slots, in flat pointer-free arrays the GC
// never scans. Growth rehashes one bucket at a time, never the whole table.
//
// A Table is owned by one goroutine; it is not safe for concurrent use.
package hot
