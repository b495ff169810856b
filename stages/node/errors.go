package node

import (
	"errors"

	"github.com/tally-dev/tally/stages/cluster"
)

var (
	// ErrOwned is returned by Start when another tallyd runs on this prefix and this
	// one was not told to join it (wrapped with ErrConfig: the error says to pass --join).
	ErrOwned = cluster.ErrOwned
	// ErrMemTooSmall is a memory budget (Config.MaxMem) below what a process needs
	// beside its counter tables.
	ErrMemTooSmall = errors.New("memory budget too small")
	// ErrConfig wraps every error of Start that a restart cannot cure: a Config that does
	// not validate, a partition count or stream setting NATS holds otherwise
	// (pipeline.ErrPartitions, pipeline.ErrStreamConfig), a listen address or NATS
	// credentials that cannot be used, another live tallyd on the prefix without
	// Config.Join (ErrOwned). tallyd exits 2 on it, which systemd does not restart.
	ErrConfig = errors.New("configuration")
)
