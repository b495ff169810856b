// Package counter is the counter worker: one Worker per (family, partition) applies delta
// batches to its in-RAM table through a hop.In — each source partition's batches
// strictly in their gap-free order, a batch above a gap held (its number in the
// checkpoint's marks, its payload under a key of its own) until the gap fills, one
// already applied skipped however late it comes — and every flush interval, or once
// MaxDirty deltas were applied (also between the batches a filled gap releases), writes
// the ids that changed together with its stream position, marks and the change events
// announcing their new values to Badger in one transaction of bounded size. The change
// events are published after the commit through a hop.Outbox, one checkpoint at a time,
// and sent again at the next start when a crash came first. Repeated deltas to the same
// id within a window become one write and one change (+1 +1 +1 → +3).
//
// Only the Run goroutine touches the table; queries reach it through a channel.
package counter
