// Package window keeps, per id, the net change of each counter by minute over the last
// day, packed: the windowed counts of one counter partition (stages/counter owns one
// Table per partition, touched by its goroutine only).
//
// An id's changes are one record of (minute, field, n) entries in minute order, minutes
// delta-encoded, in one arena shared by the table; the ids are an open-addressing table
// of the id and its record's offset, 12 bytes a slot, pointer-free so the GC never scans
// it. A record rewritten is appended afresh and the old bytes are garbage until Prune
// compacts the arena. The package knows nothing of time: callers give the minutes (Unix
// minutes) and the floor below which changes are forgotten.
package window
