// Package coldcache keeps, in RAM, the counters of ids recently read from the cold
// tier, so that ids read again — a popular old post asked by many readers, a post viewed
// again in the next batch — are not read from Badger each time. A Cache is the size of
// the ids it may hold, not of the ids read; it is owned by one goroutine (a counter
// worker) and is not safe for concurrent use. It never reads Badger itself: what to
// cache, and when an id's counters stop being the cold tier's, is the caller's.
package coldcache
