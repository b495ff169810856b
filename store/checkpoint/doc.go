// Package checkpoint keeps a counter partition's durable state in the database
// (store/cold): its counters keyed by big-endian id (time-ordered ids sit together), the
// checkpoint saying what they reflect (the stream position and, per source, what it
// received and holds above a gap: store/delivery), the journal of what each checkpoint
// wrote, the outbox of its change events and the payloads of the delta batches it holds.
//
// A checkpoint writes its counters, marks, journal and outbox in one transaction, so
// what is stored never disagrees with the position it reflects. Its keys lie under the
// namespaces of store/internal/keys that cold.CounterKeys backs up and restores whole;
// it must not write a key outside them, nor know about NATS or the hot table.
package checkpoint
