// Package hop is the exactly-once channel for every hop between partitions inside Tally:
// delta batches from an event partition to a counter partition, events one event
// partition hands to another (relation events of a batch, copies of a system notice).
// (A counter partition's change events, which leave Tally, go one at a time, fenced by
// ownership: stages/counter.)
//
// A sender numbers what it sends to each destination 1, 2, 3, … without gaps and keeps
// the last number with its own state; it writes each message in its outbox in the same
// transaction as the state change that caused it, and an Outbox publishes it after the
// commit, again and again until it is stored (under the same message id). A receiver (In)
// keeps, with its own state, the highest number applied from each source and the numbers
// of the messages that arrived above a gap (their payloads in a HeldStore the
// destination supplies), and applies them strictly in order, handing held ones out one
// at a time so the destination's transactions stay bounded: a message sent again is
// skipped however late it comes. Nothing here depends on JetStream's duplicate window,
// which only deduplicates producers' retries.
//
// The package needs no NATS server: a Publisher is the one method of a JetStream
// context it uses, so its tests run against fakes that fail, delay and reorder.
package hop
