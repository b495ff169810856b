package counter

import (
	"errors"
	"fmt"

	"github.com/tally-dev/tally/pipeline"
)

// ErrNotOwned answers a query to a partition whose lease this process may have lost: the
// process that owns it now has the true counts. It is pipeline.ErrUnavailable, as
// ErrStopped is: a query asks the partition's owner elsewhere.
var ErrNotOwned = fmt.Errorf("%w: the partition may be owned by another process", pipeline.ErrUnavailable)

// ErrStopped answers a query to a worker that has stopped (its Run has returned): the
// partition is handed over, or stopping here.
var ErrStopped = fmt.Errorf("%w: the partition has stopped in this process", pipeline.ErrUnavailable)

// errSnapshotFile is a snapshot file the worker cannot rebuild its table from (damaged,
// of another version or not covered by the journal): it loads every stored counter
// instead.
var errSnapshotFile = errors.New("bad snapshot file")

// errNoAck fails a change event not acknowledged within the publisher's ack timeout
// (hop.AckTimeout): it is sent again, under the same message id.
var errNoAck = errors.New("change event not acknowledged in time")
