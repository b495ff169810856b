// Command tallyd runs Tally: embedded NATS with JetStream (or an existing NATS), an
// event stage and counter workers for every partition, and the query server.
//
//	go run ./cmd/tallyd                       # 127.0.0.1:4222, data in ./data
//	go run ./cmd/tallyd --nats nats://a:4222  # join existing NATS servers
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	context.AfterFunc(ctx, stop) // a second Ctrl-C kills at once
	os.Exit(run(ctx, os.Args[1:], os.Getenv, os.Stderr))
}
