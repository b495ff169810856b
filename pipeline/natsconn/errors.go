package natsconn

import "errors"

// ErrConfig is a connection configuration that cannot work (a certificate without its
// key, a context or an nkey that does not load); callers match it with errors.Is, and
// tallyd exits 2.
var ErrConfig = errors.New("NATS connection configuration")
