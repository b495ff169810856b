package query

import "errors"

// ErrMaxLag is a --max-lag that is neither a count of messages nor a duration.
var ErrMaxLag = errors.New("max lag must be a number of messages (10000) or a duration (30s)")

// errGone marks an answer withheld by a process that no longer holds the partition
// asked (stopped while the request was queued, or delivered while its subscription
// drained): a hand-over under way, which the asker waits out as it waits out no
// responders (see request and goneHeader).
var errGone = errors.New("no longer in this process")
