// Package pipeline is the wire: subject names, event, delta, change and query types,
// their MessagePack and JSON codecs, the partition function and stream
// setup. It never imports the NATS server (package embedded does), so that a client
// importing it stays light.
//
// Everything a producer, a stage or a client must agree on lives here. It never touches
// Badger or any other local state.
package pipeline
