// Package store defines Table, the in-RAM counter table a counter worker owns for one
// (family, partition), and Map, the plain-map implementation used as the reference in
// tests and benchmarks.
//
// A Table is owned by a single goroutine and is not safe for concurrent use. It never
// stores an all-zero entry: an absent id reads as zeros. Store packages never import NATS.
package store
