//go:build race

package systest

// raceEnabled is whether the race detector is on: it slows the tallyd processes the
// availability tests start (each a copy of this test binary) five to ten times, too
// slow for a standby to stay within StandbyLag of its owner on two cores.
const raceEnabled = true
