// Package unread keeps what unread counts need besides counters, in the cold tier: each
// user's reader state (the place of their last read and last notification of each
// kind) and the notifications no read has covered yet, and for feeds the posts, who
// follows whom since when, the authors' states, the feed reads and the system notices.
// Everything is keyed by places in the events stream, never by time.
//
// It stores; the rules that decide what to store are stages/event's. It writes in the
// caller's *cold.Txn, so a stage commits its unread state with the rest of its change.
package unread
