package cold

import "errors"

// ErrCorrupt wraps a stored value, or a backup, that cannot be decoded.
var ErrCorrupt = errors.New("corrupt stored value")

// ErrNewerLayout refuses a backup or a database written in a key layout newer than this
// code knows (see Layout): read as this layout it would be half read — likes, relations
// or places missing — so it is not read at all. A tallyd of that layout or newer reads it.
var ErrNewerLayout = errors.New("state written in a newer layout than this tallyd knows")

// ErrTxnTooBig refuses a write that would make its transaction larger than the database
// takes in one commit: the caller cuts its work into smaller transactions (it is never a
// reason to dead-letter).
var ErrTxnTooBig = errors.New("transaction too big")
