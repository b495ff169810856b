// Package natsconn is how tallyd and the tally command connect to NATS: URLs, user
// credentials, nkeys, TLS, the nats CLI's contexts and a custom inbox prefix, given the
// same way to both; and Redact, which keeps the passwords and tokens in NATS URLs out of
// logs and error messages.
//
// It never imports the NATS server. The client package does not import it either: an
// application gives its own nats.Conn to client.New.
package natsconn
