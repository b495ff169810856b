package hop

// Window and WindowBytes bound what one sender has out towards one destination: an
// Outbox publishes an entry to a destination only while fewer than Window entries, and
// with it at most WindowBytes of payload, were published to that destination since,
// and including, the oldest one not yet known to be stored there (entries sent again
// keep their place; an entry larger than WindowBytes goes alone, when nothing else to
// its destination is out; entries stored before a restart that the Outbox cannot count
// fill the window, see Outbox). A receiver therefore never holds more than Window-1 batches,
// nor more than WindowBytes of payload, from one source above a gap while the gap can
// still fill, and its limits (DefaultMaxHeld, DefaultMaxHeldBytes) follow from these
// bounds, never from a guess of how long a retry takes.
const (
	Window = 1024
	// WindowBytes is small beside a destination's bandwidth (2 MiB out per ack round
	// trip) and large beside a batch (a delta batch is at most 160 KiB, a hop batch half
	// the server's payload limit). From every source of the default 16 partitions at
	// once, it is the 32 MiB a receiver holds above gaps (DefaultMaxHeldBytes).
	WindowBytes = 2 << 20
)
