// Package cold is Tally's database, in Badger: the transactions the other store packages
// write through — relations and likes (store/graph), counter checkpoints
// (store/checkpoint), the event stage's state and outbox (store/stagelog), unread state
// (store/unread) — and what moves every key of a partition between processes: backups,
// restores and clears of the keys that move as one (Keys), and the key layout a
// database and a backup are in (Layout; graph.Migrate and graph.Upgrade move older
// ones).
//
// Writes that must be atomic take a *Txn from the caller (DB.NewTxn, Update, View), so a
// stage commits its state change, outbox and position in one transaction. Txn is the
// store's, not Badger's: no package outside store/ imports Badger, and a transaction too
// big is ErrTxnTooBig. It must not import the packages that write through it: it knows
// their keys by the namespaces of store/internal/keys alone, and nothing here knows
// about NATS.
package cold
