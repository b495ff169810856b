// Package hoptest injects faults into what an Outbox publishes, for tests and the chaos
// run: a FaultyPublisher fails publishes, delays acks, reorders messages and loses them
// silently, from a seeded random source, around any hop.Publisher. A test hands it to
// the stages through their Publisher (event.Config, counter.Config) or to a whole node
// through node.Config.WrapPublisher.
//
// Nothing in tallyd imports it: faults are no setting of a production process.
package hoptest
