// Package cold is Tally's durable state in Badger: relations (who liked what, who follows
// whom) with newest-first indexes, the event stage's outbox and positions, and the
// counter workers' checkpoints (counters keyed by big-endian id, so time-ordered ids sit
// together, plus the stream position and per-source watermarks they reflect). It is
// also the database the other store packages write through — store/unread keeps users'
// unread state in its Txn — and what moves every key of a partition: backups, restores
// and layout migrations (Part, Migrate), and the RAM a partition keeps of what its
// events read (Resident).
//
// Writes that must be atomic take a *Txn from the caller (DB.NewTxn, Update, View), so a
// stage commits its state change, outbox and position in one transaction. Txn is the
// store's, not Badger's: no package outside store/ imports Badger, and a transaction too
// big is ErrTxnTooBig. Nothing here knows about NATS.
package cold
