//go:build race

package hot_test

const raceEnabled = true
