package cluster

import "errors"

// Sentinel errors; callers match them with errors.Is. Messages that wrap them say what
// exactly was wrong.
var (
	// ErrBucketConfig: an existing bucket's configuration (the ownership bucket's, or the
	// state bucket's) would break Tally; the message names the field and the value Tally
	// needs.
	ErrBucketConfig = errors.New("bucket configuration")
)
