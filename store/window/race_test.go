//go:build race

package window

// raceEnabled: the race detector makes memory figures meaningless and 1 M-id runs slow.
const raceEnabled = true
