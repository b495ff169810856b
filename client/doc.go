// Package client is the Go library a service imports to talk to Tally: publish events
// (one by one or batched) with transaction ids, read counts of many ids in one request,
// ask which posts a user liked, page through relations, read unread counts, and watch
// count changes.
//
//	c, _ := client.New(nc)
//	c.Publish(ctx, pipeline.Event{Type: "like", UID: 7, Post: 42, Tx: "req-123"})
//	counts, _ := c.Get(ctx, "post", 42, 43)
package client
