package pipeline

import (
	"errors"
	"fmt"
)

// Sentinel errors; callers match them with errors.Is. Messages that wrap them say what
// exactly was wrong.
var (
	ErrBadEvent      = errors.New("bad event")
	ErrBadRequest    = errors.New("bad request")
	ErrUnknownFamily = errors.New("unknown family")
	ErrUnknownField  = errors.New("unknown field")
	ErrTooMany       = errors.New("too many items")
	ErrPartitions    = errors.New("partition count differs from the existing stream")
	// ErrStreamConfig: a stream's configuration (an existing stream's, or the one asked
	// for) would break Tally; the message names the field and the value Tally needs.
	ErrStreamConfig = errors.New("stream configuration")
	// ErrUnavailable: the partitions holding an answer are being handed over between
	// processes, or no process answered in time; asking again shortly may succeed.
	ErrUnavailable = errors.New("unavailable")
)

// errBatchSize: a batch holds more events than MaxBatch. The batch decoders stop there,
// so that a large payload of small events does not make a large slice first.
var errBatchSize = fmt.Errorf("batch of more than %d events", MaxBatch)

// errTrailingJSON: a JSON payload holds more than one value.
var errTrailingJSON = errors.New("trailing data after the JSON object")
