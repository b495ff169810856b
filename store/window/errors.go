package window

import "errors"

// ErrCorrupt is a record that cannot be decoded: damaged on disk.
var ErrCorrupt = errors.New("corrupt window record")
