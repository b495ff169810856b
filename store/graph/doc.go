// Package graph keeps relations in the database (store/cold): who liked what, who
// commented on what, who follows whom, with newest-first lists on each side, each
// relation's state by the places of its events (store/rel), likes in like records and
// liker chunks (likes.go), and the RAM a partition keeps of what its events read
// (Resident). It also moves state of an older key layout to this one — every layout
// change so far moved relations and likes: Migrate for a local database at start, and
// Upgrade, which cold.Options.Upgrade takes, for a backup restored from an older process.
//
// Every key lies under the graph namespaces of store/internal/keys, in the partition of
// the event that writes it, which cold.EventKeys backs up and restores whole; it must not
// write a key outside them (Migrate excepted: it moves the old layout's keys of every
// package), nor know about NATS or the rules that decide which events relate.
package graph
