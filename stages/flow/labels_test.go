package flow

import (
	"bytes"
	"context"
	"runtime/pprof"
	"strings"
	"testing"
)

// TestLabels: a goroutine labelled for its stage, partition and role passes the labels
// to the goroutines it starts, but not to those it starts through unlabelled (a
// connection's, a reader's), and keeps its own.
func TestLabels(t *testing.T) {
	stop := make(chan struct{})
	defer close(stop)
	started := make(chan struct{}, 3)
	done := make(chan struct{})
	go func() {
		defer close(done)
		Label(context.Background(), "counter", "post", 3, RoleStandby)
		go labelledChild(started, stop)
		unlabelled(func() { go unlabelledChild(started, stop) })
		go afterChild(started, stop)
	}()
	<-done
	for range 3 {
		<-started
	}
	want := `# labels: {"family":"post", "partition":"3", "role":"standby", "stage":"counter"}`
	for fn, labelled := range map[string]bool{"labelledChild": true, "unlabelledChild": false, "afterChild": true} {
		got := goroutineOf(t, fn)
		if strings.Contains(got, want) != labelled {
			t.Errorf("%s: labelled %v, want %v:\n%s", fn, !labelled, labelled, got)
		}
	}
}

func labelledChild(started chan<- struct{}, stop <-chan struct{})   { started <- struct{}{}; <-stop }
func unlabelledChild(started chan<- struct{}, stop <-chan struct{}) { started <- struct{}{}; <-stop }
func afterChild(started chan<- struct{}, stop <-chan struct{})      { started <- struct{}{}; <-stop }

// goroutineOf is the goroutine profile's record of the goroutine running fn.
func goroutineOf(t *testing.T, fn string) string {
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 1); err != nil {
		t.Fatal(err)
	}
	for rec := range strings.SplitSeq(buf.String(), "\n\n") {
		if strings.Contains(rec, "flow."+fn+"+") {
			return rec
		}
	}
	t.Fatalf("no goroutine runs %s", fn)
	return ""
}
