// Package node runs one Tally process: it starts (or joins) NATS, sets up the streams,
// opens Badger, and runs an event stage per partition, a counter worker per family and
// partition, and the query server, until its context ends; then it stops taking
// queries, lets every partition flush, and closes storage and NATS in that order.
package node
