// Package rig is the shared rig of Tally's system tests (stages/systest): it starts a
// node in the test's process with a test configuration, a NATS server that can be
// stopped and started again, tallyd as a real process (built once per test binary,
// SIGKILLed at will, its /metrics and CPU read from outside) and a cluster of them; it
// picks free ports, polls until a condition holds, and compares what Tally answers with
// stages/reference's model of the stored stream.
//
// It is for tests only: nothing outside stages/systest may import it (deps_test.go
// checks that tallyd and every other package of the module stay clear of it), and it
// holds no rule of its own — every expected answer comes from stages/reference.
package rig
