package pipeline_test

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/embedded"
	"github.com/tally-dev/tally/pipeline/natstest"
)

// BenchmarkEventsStream is what the embedded nats-server keeps in RAM for the events
// stream as producers send one event a message, each under its own key (a like of post
// i, as a client in any language sends it): the live heap after the messages are stored
// beside before, per message, the stream's subjects as the server counts them, and the
// rate of publishing, and the time the server takes to start again on what it stored
// (until the stream answers) with the live heap then; events stored by partition (the
// default) beside by key (KeyedEvents, as before 1.8), and by partition with a
// Nats-Msg-Id each, which the server keeps for the duplicate window (2 minutes).
// Run: go test ./pipeline -run XXX -bench EventsStream -benchtime 300000x
func BenchmarkEventsStream(b *testing.B) {
	for _, c := range []struct {
		name         string
		keyed, msgID bool
	}{{"by-partition", false, false}, {"by-key", true, false}, {"by-partition-msg-id", false, true}} {
		b.Run(c.name, func(b *testing.B) { benchEventsStream(b, c.keyed, c.msgID) })
	}
}

func benchEventsStream(b *testing.B, keyed, msgID bool) {
	dir := b.TempDir()
	start := func() (*server.Server, jetstream.JetStream) {
		s, err := embedded.Start(embedded.Config{Host: "127.0.0.1", Port: -1, StoreDir: dir})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			s.Shutdown()
			s.WaitForShutdown()
		})
		js, _ := jetstream.New(natstest.Connect(b, s))
		return s, js
	}
	s, js := start()
	ctx := context.Background()
	cfg := pipeline.DefaultStreamConfig()
	cfg.KeyedEvents = keyed
	if err := pipeline.Setup(ctx, js, cfg); err != nil {
		b.Fatal(err)
	}
	before := liveHeap()
	began := time.Now()
	futures := make([]jetstream.PubAckFuture, 0, 4096)
	wait := func() {
		for _, f := range futures {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				b.Fatal(err)
			}
		}
		futures = futures[:0]
	}
	data := []byte(`{"uid":"7","post":"42","owner":"3"}`)
	for i := range b.N {
		var opts []jetstream.PublishOpt
		if msgID { // as producers send it: the server keeps it for the duplicate window
			opts = append(opts, jetstream.WithMsgID("like."+strconv.Itoa(i)))
		}
		f, err := js.PublishAsync(cfg.Subjects.Event("like", pipeline.ID(1_700_000_000_000<<22+i<<12)), data, opts...)
		if err != nil {
			b.Fatal(err)
		}
		if futures = append(futures, f); len(futures) == cap(futures) {
			wait()
		}
	}
	wait()
	elapsed := time.Since(began)
	st, err := js.Stream(ctx, cfg.Subjects.EventsStream())
	if err != nil {
		b.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if info.State.Msgs != uint64(b.N) {
		b.Fatalf("stored %d messages, want %d", info.State.Msgs, b.N)
	}
	b.ReportMetric(float64(liveHeap()-before)/float64(b.N), "heap-B/msg")
	b.ReportMetric(float64(info.State.NumSubjects), "subjects")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")

	s.Shutdown()
	s.WaitForShutdown()
	before = liveHeap()
	began = time.Now()
	_, js = start()
	for {
		if st, err := js.Stream(ctx, cfg.Subjects.EventsStream()); err == nil && st.CachedInfo().State.Msgs == uint64(b.N) {
			break
		}
		if time.Since(began) > time.Minute {
			b.Fatal("the restarted server has not loaded the events stream in a minute")
		}
		time.Sleep(time.Millisecond)
	}
	b.ReportMetric(float64(time.Since(began).Milliseconds()), "restart-ms")
	b.ReportMetric(float64(liveHeap()-before)/float64(b.N), "restart-heap-B/msg")
}

// liveHeap is the heap in use after a collection.
func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
