// Package cold is Tally's durable state in Badger: relations (who liked what, who follows
// whom) with newest-first indexes, the event stage's outbox and positions, and the
// counter workers' checkpoints (counters keyed by big-endian id, so time-ordered ids sit
// together, plus the stream position and per-source watermarks they reflect).
//
// Writes that must be atomic take a *badger.Txn from the caller, so a stage commits its
// state change, outbox and position in one transaction. Nothing here knows about NATS.
package cold
