package hop

// Window bounds what one sender has out towards one destination: an Outbox publishes an
// entry to a destination only while fewer than Window entries to that destination were
// published since, and including, the oldest one not yet known to be stored there
// (entries sent again keep their place). A receiver therefore never holds more than
// Window-1 batches of one source above a gap while the gap can still fill, and its limit
// (DefaultMaxHeld) follows from this bound, never from a guess of how long a retry takes.
const Window = 1024
