// Package client is the Go library a service imports to talk to Tally: publish events
// (one by one or batched) with transaction ids, read counts of many ids in one request,
// ask which posts a user liked, page through relations, read unread counts, and watch
// count changes.
//
//	c, _ := client.New(nc)
//	c.Publish(ctx, pipeline.Event{Type: "like", UID: 7, Post: 42, Tx: "req-123"})
//	counts, _ := c.Get(ctx, "post", 42, 43)
//
// The client uses the connection it is given as it is: authenticate and secure it with
// nats.go's options (nats.UserCredentials, nats.Nkey, nats.RootCAs, …). Where each user
// may read only its own replies, give the connection the user's inbox prefix,
// nats.CustomInboxPrefix("_INBOX_alice"): every request, publish acknowledgement and
// watch of the client then answers there.
//
// Every request is a read. One still waiting when the connection reconnects (its NATS
// server went, and its message or its answer with it) is sent again, and one still
// unanswered after a quarter of its time (lost in a server of the cluster that went)
// once more; the first answer is taken. The client's replies come to one subscription
// of its own under the connection's inbox prefix. A get asks the tallyd processes that
// serve its ids' partitions, each once and all at once, once the client has learned
// where they are from an earlier get's reply (tallyd 1.9, where.go; WithDirectGets).
//
// Failures are tested with errors.Is against the sentinels in errors.go.
package client
