// Package node runs one Tally process: it starts (or joins) NATS, sets up the streams,
// opens Badger and runs the query server; it owns the event stages of its prefix (one
// per partition) unless another process does, and a share of the counter partitions (a
// worker per family of each), which it hands over to and takes from the other processes
// of the prefix as they join and leave (parts.go); on a clean stop it stops taking
// queries, lets every partition flush, hands its partitions over and closes storage and
// NATS in that order. What it owns is fenced: leases renewed by compare-and-set on their
// revision (lease.go), and state backups that become current only through a pointer
// written under the owner's lease (pointer.go).
package node
