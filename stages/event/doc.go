// Package event is the event stage: one Stage per event partition reads the partition's
// events in stream order, keeps relation state (who liked what, who follows whom) in
// Badger, turns each event into coalesced deltas for the counter partitions, logs each
// transaction with its outbox of deltas to the partition's log in NATS (log.go), and
// commits the state change and the consumed stream position in one Badger transaction.
// Only then does it publish the outbox, under message ids that are the same every time
// it is re-sent (from the log after a crash: outbox.go), so a crash at any instant
// neither loses nor repeats a count. A stage that does not log keeps its outbox in
// Badger, in the same transaction.
//
// It also keeps what unread needs besides counters — reads, follows, posts and notices
// by their place in the events stream — and hands other partitions what belongs to
// them: relation events of a batch, notice copies, notifications of their users and the
// pushed posts (see unread.go).
//
// A malformed event becomes a dead-letter entry through the same outbox: it is kept,
// counted, and never stops the partition.
package event
