package query

import "errors"

// ErrMaxLag is a --max-lag that is neither a count of messages nor a duration.
var ErrMaxLag = errors.New("max lag must be a number of messages (10000) or a duration (30s)")
