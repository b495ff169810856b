// Package node runs one Tally process: it starts (or joins) NATS, sets up the streams,
// opens Badger and runs the query server; it owns a share of the partitions of its
// prefix, each one's event stage and counter workers (one per family) together, which it
// hands over to and takes from the other processes of the prefix as they join and leave
// (parts.go, with the leases, membership and assignment of stages/cluster); on a clean
// stop it stops taking queries, lets every partition flush, hands its partitions over
// and closes storage and NATS in that order. A partition's state moves as two backups
// (backup.go: its counters and its event stage) through stages/cluster's Backups.
package node
