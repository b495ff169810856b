// Package stages holds Tally's processing stages, each in its own package: event (events
// → relation state → deltas, exactly once through an outbox), counter (deltas → counters,
// checkpoints, change events), query (request-reply), and node, which wires them into
// one process. flow has the JetStream plumbing they share.
package stages
