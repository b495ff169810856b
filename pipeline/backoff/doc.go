// Package backoff spaces the retries of everything in Tally that waits for NATS to come
// back (reading a stream, appending to a partition's log, re-sending an outbox, setting
// the streams up): one exponential backoff with decorrelated jitter and a cap, so that
// partitions and processes that failed together do not retry in step. It owns no
// goroutine and no global state.
package backoff
