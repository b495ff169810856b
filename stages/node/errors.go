package node

import (
	"errors"

	"github.com/tally-dev/tally/stages/cluster"
)

// Sentinel errors; callers match them with errors.Is. Messages that wrap them say what
// exactly was wrong.
var (
	// ErrOwned is returned by Start when another tallyd runs on this prefix and this
	// one was not told to join it (wrapped with ErrConfig: the error says to pass --join).
	ErrOwned = cluster.ErrOwned
	// ErrMemTooSmall is a memory budget (Config.MaxMem) below what a process needs
	// beside its counter tables.
	ErrMemTooSmall = errors.New("memory budget too small")
	// ErrConfig wraps every error of Start that a restart cannot cure: a Config that does
	// not validate, a partition count or stream setting NATS holds otherwise
	// (pipeline.ErrPartitions, pipeline.ErrStreamConfig), a bucket setting that would
	// break Tally (cluster.ErrBucketConfig), a listen address or NATS credentials that
	// cannot be used, another live tallyd on the prefix without Config.Join (ErrOwned).
	// tallyd exits 2 on it, which systemd does not restart.
	ErrConfig = errors.New("configuration")
	// ErrLegacyState refuses to take a partition whose event state is still in the one
	// backup of every event stage that versions before per-partition stages stored: the
	// process that owned those stages moves it into per-partition backups when started
	// first.
	ErrLegacyState = errors.New("the event stages' state is in a backup of an older version")
)

// errBehind stops a standby that did not reach a backup before it could be purged past.
var errBehind = errors.New("the standby did not reach a backup while it was current")
