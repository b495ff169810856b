// Package cluster owns the mechanics by which the tallyd of a prefix share its
// partitions: leases in a NATS KV bucket, renewed by compare-and-set on their revision
// (the fencing token) and given up when a renewal cannot be made in time; the live
// processes (members), each renewing its own key; and the sticky assignment of
// partitions to members. It knows nothing of what a partition holds: stages/node wires
// partitions to leases, and backs their state up under them.
package cluster
