package hop

import "errors"

var (
	// errAckTimeout fails a publish not acknowledged within AckTimeout.
	errAckTimeout = errors.New("no acknowledgement in time")
)
