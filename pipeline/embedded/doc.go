// Package embedded starts the nats-server that a tallyd (or a test) runs inside its own
// process: JetStream on, a store directory, and optionally users, nkeys, TLS or a whole
// nats-server configuration file.
//
// It lives apart from package pipeline so that the wire types, and the client that
// imports them, do not link the NATS server: only tallyd and tests import this package.
package embedded
