package hop

import "errors"

var (
	// errAckTimeout fails a publish not acknowledged within AckTimeout.
	errAckTimeout = errors.New("no acknowledgement in time")
	// errWoken ends an outbox's wait whose wake channel is ready (ReapUntil).
	errWoken = errors.New("outbox: woken")
)
