// Package stagelog keeps an event-stage partition's own state in the database
// (store/cold): the State it commits with every transaction (its stream position, what
// it sent and received of each hop: store/delivery), its outbox of messages to publish
// after the commit, the payloads of the hop batches it holds above a gap, and the Record
// of a transaction that the stage logs to NATS before it commits, from which a standby
// or a new owner replays it.
//
// Its keys lie under the namespaces of store/internal/keys that cold.EventKeys backs up
// and restores whole, the State's key last (what the partition reflects); it must not
// write a key outside them, nor know about NATS: the stage logs and publishes.
package stagelog
