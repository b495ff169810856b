package flow

import (
	"bytes"
	"context"
	"log/slog"
	"runtime/pprof"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline/natstest"
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

// A labelled goroutine's Reader — its consumer, and the connection a Spread makes for it
// (shared with other Readers) — runs on goroutines without its labels: they would keep
// them after its role changed.
func TestReadUnlabelled(t *testing.T) {
	s := natstest.Start(t)
	js, err := jetstream.New(natstest.Connect(t, s))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "L", Subjects: []string{"l.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "l.1", []byte("x")); err != nil {
		t.Fatal(err)
	}
	sp := NewSpread(js, 1<<20, func() (*nats.Conn, error) { return nats.Connect(s.ClientURL()) }, slog.New(slog.DiscardHandler))
	defer sp.Close()
	read, stop := make(chan struct{}), make(chan struct{})
	defer close(stop)
	go func() {
		Label(ctx, "event", "", 77, RoleStandby)
		r, err := Read(ctx, sp, "L", "l.>", 0, Buffer{Msgs: 8}, nil)
		if err != nil {
			t.Error(err)
			close(read)
			return
		}
		defer r.Stop()
		<-r.C
		close(read)
		<-stop
	}()
	<-read
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 1); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(buf.String(), `"partition":"77"`); n != 1 {
		t.Fatalf("%d goroutine records labelled with the reader's partition, want 1 (its user's):\n%s", n, buf.String())
	}
}
