package pipeline

import (
	"hash/fnv"
	"strconv"
)

// Partition returns the partition of a key token among n. It is the function
// nats-server's subject transform partition(n, token) computes (FNV-1a 32 of the token
// modulo n), so ids land in the same partition whether the server or a client routes them.
func Partition(key string, n int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % uint32(n))
}

// PartitionOf is Partition of the id's decimal form.
func PartitionOf(id ID, n int) int {
	var buf [20]byte
	b := strconv.AppendUint(buf[:0], uint64(id), 10)
	h := uint32(2166136261)
	for _, c := range b {
		h ^= uint32(c)
		h *= 16777619
	}
	return int(h % uint32(n))
}
