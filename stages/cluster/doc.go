// Package cluster owns the mechanics by which the tallyd of a prefix share its
// partitions: leases in a NATS KV bucket, renewed by compare-and-set on their revision
// (the fencing token) and given up when a renewal cannot be made in time; the live
// processes (members), each renewing its own key; the sticky assignment of partitions to
// members; and state backups in a NATS object store, each current only through a
// pointer written under the owner's lease, restored by a new owner (Backups). It knows
// nothing of what a partition holds: stages/node wires partitions to leases and says
// which keys (cold.Keys) make up each piece of state.
package cluster
