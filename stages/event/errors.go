package event

import "errors"

// ErrFenced stops a stage whose log append found a record it did not write: another
// process owns the partition now.
var ErrFenced = errors.New("the partition's log was written by another owner")

// ErrGap stops a replay or a standby whose state the log or the events stream no
// longer reaches back to (purged or aged out past it): it must start from a newer
// backup.
var ErrGap = errors.New("the log does not reach back to the state")

// errTooBig is a transaction that cannot take all of its messages: the store refused a
// write (cold.ErrTxnTooBig, by Badger's count and size checks), or its log record would be
// larger than NATS accepts.
var errTooBig = errors.New("transaction too large")
