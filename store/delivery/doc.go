// Package delivery holds what a partition's stored state says of its hops (stages/hop),
// whether it is a counter partition's checkpoint (store/checkpoint) or an event stage's
// state (store/stagelog): what it received from each source (Mark), the batches it holds
// above a gap (Held, HeldRef) and the messages it has to send (OutboxEntry).
//
// It owns these values and their MessagePack names, which are part of what is stored,
// and reads a held batch's payload (Payload); where the values and payloads are stored
// is the business of the packages that store them: it writes nothing.
package delivery
