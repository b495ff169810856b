package hop

// Window and WindowBytes bound what one sender has out towards one destination: an
// Outbox publishes an entry to a destination only while fewer than Window entries, and
// with it at most WindowBytes of payload, were published to that destination since,
// and including, the oldest one not yet known to be stored there. Entries sent again
// keep their place; an entry larger than WindowBytes goes alone, when nothing else to
// its destination is out; entries stored before a restart, which the Outbox cannot
// count, fill the window (see Outbox). A receiver therefore never holds more than
// Window-1 batches, nor more than WindowBytes of payload, from one source above a gap
// while the gap can still fill: its limit (DefaultMaxHeld) follows from this bound,
// never from a guess of how long a retry takes.
const (
	Window = 1024
	// WindowBytes is small beside a destination's bandwidth (2 MiB out per ack round
	// trip) and large beside a batch (a delta batch is at most 160 KiB; a hop batch is
	// at most half the server's payload limit, and goes alone when larger). It bounds
	// the payloads a receiver holds above a gap per source, which it writes with its
	// state (the event stage in its marks and log records, a counter partition under
	// keys of their own): without it, 1 023 hop batches of 4 MiB could be held.
	WindowBytes = 2 << 20
)
