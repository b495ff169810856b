//go:build race

package buildinfo

// Race is whether the binary was built with the race detector (-race). Tests that
// measure memory, or run sizes whose point is their size, scale down by it: the
// detector multiplies memory and slows everything five to ten times, and CI runs every
// test under it.
const Race = true
