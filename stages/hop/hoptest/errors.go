package hoptest

import "errors"

var (
	// ErrInjected is the failure a FaultyPublisher makes up; it is transient, like a
	// publish lost to a NATS restart, so an Outbox sends the entry again.
	ErrInjected = errors.New("injected publish fault")
	// ErrBadFaults is returned by ParseFaults for a specification it cannot read.
	ErrBadFaults = errors.New("bad fault specification")

	// errNoFinder answers StreamNameBySubject when the wrapped Publisher cannot: an
	// Outbox then treats the failure as transient, as it would without a StreamFinder.
	errNoFinder = errors.New("the wrapped publisher does not look streams up")
)
