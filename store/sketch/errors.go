package sketch

import "errors"

// ErrCorrupt is a stored sketch that does not decode: an unknown form, a length past
// its end, a register out of range or entries out of order.
var ErrCorrupt = errors.New("corrupt sketch")
