package rel

import "errors"

// ErrCorrupt is a stored state that does not decode.
var ErrCorrupt = errors.New("corrupt relation state")
