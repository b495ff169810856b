package pipeline

import (
	"errors"
	"fmt"
)

// Sentinel errors; callers match them with errors.Is. Messages that wrap them say what
// exactly was wrong.
var (
	// ErrBadEvent: an event that does not decode or validate; the stage dead-letters it
	// and the rest of its batch stands.
	ErrBadEvent = errors.New("bad event")
	// ErrBadRequest: a request that does not decode or asks for what cannot be answered
	// (code bad_request); the message says which field and what it must be.
	ErrBadRequest = errors.New("bad request")
	// ErrUnknownFamily: no counter family of that name (code unknown_family).
	ErrUnknownFamily = errors.New("unknown family")
	// ErrUnknownField: a family has no field of that name (code bad_request).
	ErrUnknownField = errors.New("unknown field")
	// ErrTooMany: more items than one request may hold (code bad_request).
	ErrTooMany = errors.New("too many items")
	// ErrPartitions: the partition count asked for is not the existing events stream's;
	// changing it would move keys between partitions while older events are still in
	// the stream.
	ErrPartitions = errors.New("partition count differs from the existing stream")
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

// errTruncated: a MessagePack payload ends inside a value.
var errTruncated = errors.New("truncated MessagePack")

// errNotFast: what the get codec's readers leave to reflection (getcodec.go); never
// returned to a caller.
var errNotFast = errors.New("msgpack: read by reflection")

// errTrailing: a MessagePack payload holds more than one value.
var errTrailing = errors.New("trailing data after the MessagePack value")
