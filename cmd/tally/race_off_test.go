//go:build !race

package main

func raceFlags() []string { return nil }
