package node

import (
	"errors"

	"github.com/tally-dev/tally/stages/cluster"
)

var (
	// ErrOwned is returned by Start when another tallyd runs on this prefix and this
	// one was not told to join it.
	ErrOwned = cluster.ErrOwned
	// ErrMemTooSmall is a memory budget (Config.MaxMem) below what a process needs
	// beside its counter tables.
	ErrMemTooSmall = errors.New("memory budget too small")
)
