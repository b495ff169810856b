package client

import (
	"errors"

	"github.com/tally-dev/tally/pipeline"
)

// Errors a caller tests with errors.Is. An error reply from Tally wraps ErrRemote and,
// when its code says which kind of failure it was, one of the sentinels below; a
// mistake the client catches before sending wraps the sentinel alone.
var (
	// ErrRemote wraps every error reply from Tally: the request was understood and
	// refused, or no partition could answer.
	ErrRemote = errors.New("tally replied with an error")
	// ErrBadRequest: the request cannot be answered as sent (an empty or too long list
	// of ids, a missing uid, an unknown list kind); retrying it fails the same way.
	ErrBadRequest = pipeline.ErrBadRequest
	// ErrUnknownFamily: no counter family of that name is configured.
	ErrUnknownFamily = pipeline.ErrUnknownFamily
	// ErrUnavailable: no tallyd answered in time (none running, or the partitions
	// holding the answer are being handed over between processes). Asking again
	// shortly may succeed. A Get that could count some ids is not an error: it lists
	// the others in GetReply.Unavailable.
	ErrUnavailable = pipeline.ErrUnavailable
	// ErrBadEvent: an event the client refuses to publish (an unknown type, a batch
	// without a transaction id).
	ErrBadEvent = pipeline.ErrBadEvent
	// ErrBadChange: a message on a change subject that is not a change event (not
	// MessagePack, or a field of the wrong type); Changes yields it and goes on.
	ErrBadChange = errors.New("not a change event")
)
