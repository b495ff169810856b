package embedded

import "errors"

// ErrAuth is a security configuration the embedded server cannot run with (a user
// without a password, an nkey that does not parse, TLS files that do not load, a
// configuration file that does not); callers match it with errors.Is, and tallyd exits 2.
var ErrAuth = errors.New("embedded NATS security")
