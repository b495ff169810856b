// Package viewers keeps the distinct viewers of the posts of an event partition: each
// post's users in a sketch (store/sketch), stored in its pieces under
// U|partition|post|piece in the event stage's transaction, and a budgeted copy in RAM of
// the sketches of the posts viewed lately, so that a view reads no key of a post seen
// since.
//
// A transaction's Viewers changes copies: what it changed reaches the Cache only when
// the transaction has committed (Cache.Keep), so a transaction thrown away (too big, a
// failed commit) leaves nothing behind. It never imports NATS.
package viewers
