// Package query answers Tally's request-reply subjects: batch counts per family
// (scatter-gather over the partitions that own the ids), did-I-like, newest-first relation
// pages, unread counts, health, and audits (counts recounted from the relations and
// compared at a consistent point, drift repaired by incr events; audit.go, settle.go).
// Every process answers every subject: counters and relations of the partitions it owns
// from its own state, the others asked of their owner on <prefix>.part.<family>.<p> and
// <prefix>.part.ev.<p> (events.go); it never answers from a partition it does not own.
// Every request gets a reply; one that cannot be
// answered gets a reply whose error field says why. JSON requests are answered in JSON,
// MessagePack requests in MessagePack.
package query
