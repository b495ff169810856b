// Package systest holds Tally's system tests: whole nodes, clusters of nodes and tallyd
// processes driven through NATS as a user would — end to end, random workloads checked
// against stages/reference, SIGKILLs, NATS outages and failovers, bad input, full
// disks — and their benchmarks. Its rig (stages/systest/rig) starts what they run. It
// has no code of its own outside its tests, and nothing in production may import it.
package systest
