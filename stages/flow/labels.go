package flow

import (
	"context"
	"runtime/pprof"
	"strconv"
)

// The roles a stage's goroutines run in, as their profile labels say (Label).
const (
	RoleOwner   = "owner"
	RoleStandby = "standby"
)

// Label sets the profile labels of the calling goroutine, and of the goroutines it
// starts from then on: the stage (event, counter), its family (counters only), its
// partition and the role it runs in. A CPU profile of a live tallyd (/debug/pprof with
// --pprof; `go tool pprof -tags`, `-tagfocus role=standby`) then tells an owner's work
// from a standby's and one partition's from another's. Badger's own goroutines
// (commits, flushes, compactions), the NATS connections' and the readers' (Read) are
// shared or outlive a role, and carry none — but for one: a JetStream context's handler
// of publish acknowledgements, which nats.go starts on the first asynchronous publish,
// carries the labels of the stage that made it.
func Label(ctx context.Context, stage, family string, p int, role string) {
	kv := []string{"stage", stage, "partition", strconv.Itoa(p), "role", role}
	if family != "" {
		kv = append(kv, "family", family)
	}
	pprof.SetGoroutineLabels(pprof.WithLabels(ctx, pprof.Labels(kv...)))
}

// unlabelled runs f on a goroutine of its own that carries no profile labels, and waits
// for it: the goroutines f starts (a connection's, a consumer's) outlive the role of the
// stage that asked for them, or are shared, so they carry none either.
func unlabelled(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		pprof.SetGoroutineLabels(context.Background())
		f()
	}()
	<-done
}
