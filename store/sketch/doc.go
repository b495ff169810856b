// Package sketch counts distinct users: the viewers of a post. A Sketch is exact while
// it is small — it keeps the users themselves, up to ExactMax — and then a HyperLogLog
// of 2^14 registers (0.81 % standard error), first sparse (only the registers set,
// 4 bytes each) and, once that would be larger, dense (6 bits a register, 12 KiB, as
// Redis' PFADD keeps it).
//
// Adding a user is idempotent and sketches merge (the union of their users), so a
// sketch is the same whatever the order and the repetitions of what it was given: a
// replay or a standby that applies the same adds ends with the same bytes. A Sketch is
// not safe for concurrent use; it never imports NATS or Badger — the counter worker
// stores what Marshal writes.
package sketch
