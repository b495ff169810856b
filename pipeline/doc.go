// Package pipeline is the wire: subject names, event, delta, change and query types,
// their MessagePack and JSON codecs, the partition function, stream setup and the
// embedded NATS server.
//
// Everything a producer, a stage or a client must agree on lives here. It never touches
// Badger or any other local state.
package pipeline
