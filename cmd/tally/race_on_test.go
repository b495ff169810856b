//go:build race

package main

// raceFlags build the binaries under test as the test itself was built, so that they
// reuse its cached packages (and tallyd runs under the race detector too).
func raceFlags() []string { return []string{"-race"} }
