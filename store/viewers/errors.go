package viewers

import "errors"

// ErrCorrupt is a stored key of viewers that does not decode.
var ErrCorrupt = errors.New("corrupt viewers")
