package counter

import "errors"

// ErrNotOwned answers a query to a partition whose lease this process may have lost: the
// process that owns it now has the true counts.
var ErrNotOwned = errors.New("the partition may be owned by another process")

// errSnapshotFile is a snapshot file the worker cannot rebuild its table from (damaged,
// of another version or not covered by the journal): it loads every stored counter
// instead.
var errSnapshotFile = errors.New("bad snapshot file")
