// Package counter is the counter worker: one Worker per (family, partition) applies delta
// batches to its in-RAM table, skipping every batch it has already applied (per source
// partition, by the gap-free batch sequence), and every flush interval writes the ids
// that changed together with its stream position and watermarks to Badger in one
// transaction, then publishes their new values as one change event. Repeated deltas to
// the same id within a window become one write and one change (+1 +1 +1 → +3).
//
// Only the Run goroutine touches the table; queries reach it through a channel.
package counter
