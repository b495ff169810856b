package hot

import "errors"

// ErrSnapshot wraps every problem with a snapshot's bytes.
var ErrSnapshot = errors.New("bad hot table snapshot")
