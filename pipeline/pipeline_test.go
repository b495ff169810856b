package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/natstest"
)

// The server's subject transform and PartitionOf must route every key the same way, or
// relation state would be split between partitions. Events are stored under their
// partition's and type's subject, so the server keeps state for a few subjects, not for
// every key; a stream stored by key (KeyedEvents, every stream before 1.8) moves to that
// and back as Setup is asked, and the messages of both forms stay in their order.
func TestPartitionAgreesWithServer(t *testing.T) {
	s := natstest.Start(t)
	js, _ := jetstream.New(natstest.Connect(t, s))
	ctx := context.Background()
	cfg := pipeline.DefaultStreamConfig()
	cfg.Partitions, cfg.KeyedEvents = 7, true
	keys := []pipeline.ID{1, 2, 42, 1 << 40, 18446744073709551615, 1234567890123}
	st, _ := js.Stream(ctx, cfg.Subjects.EventsStream())
	seq := uint64(0)
	// check publishes every key and checks where the stream stored it.
	check := func(form string, subject func(p int, k pipeline.ID) string) {
		t.Helper()
		for _, k := range keys {
			if _, err := js.Publish(ctx, cfg.Subjects.Event("like", k), []byte("x"), jetstream.WithMsgID(fmt.Sprint(form, k))); err != nil {
				t.Fatal(err)
			}
			seq++
			m, err := st.GetMsg(ctx, seq)
			if err != nil {
				t.Fatal(err)
			}
			want := subject(pipeline.PartitionOf(k, 7), k)
			if m.Subject != want || pipeline.Partition(k.String(), 7) != pipeline.PartitionOf(k, 7) {
				t.Errorf("%s: key %d stored as %s, PartitionOf routes to %s", form, k, m.Subject, want)
			}
			if typ, err := cfg.Subjects.StoredType(m.Subject); typ != "like" || err != nil {
				t.Errorf("%s: the type of %s read as %q, %v", form, m.Subject, typ, err)
			}
		}
	}
	keyed := func(p int, k pipeline.ID) string { return fmt.Sprintf("tally.ep.%d.like.%d", p, k) }
	unkeyed := func(p int, _ pipeline.ID) string { return fmt.Sprintf("tally.ep.%d.like", p) }
	for i, c := range []struct {
		form    string
		keyed   bool
		subject func(int, pipeline.ID) string
	}{{"by key", true, keyed}, {"by partition", false, unkeyed}, {"by key again", true, keyed}, {"by partition again", false, unkeyed}} {
		cfg.KeyedEvents = c.keyed
		if err := pipeline.Setup(ctx, js, cfg); err != nil {
			t.Fatalf("%s: %v", c.form, err)
		}
		if i == 0 {
			if err := pipeline.Setup(ctx, js, cfg); err != nil {
				t.Fatalf("second Setup is not idempotent: %v", err)
			}
			st, _ = js.Stream(ctx, cfg.Subjects.EventsStream())
		}
		check(c.form, c.subject)
	}
	// Stored by partition, a million keys are as many subjects as one.
	info, err := st.Info(ctx, jetstream.WithSubjectFilter("tally.ep.*.*"))
	if err != nil {
		t.Fatal(err)
	}
	parts := map[int]bool{}
	for _, k := range keys {
		parts[pipeline.PartitionOf(k, 7)] = true
	}
	if len(info.State.Subjects) != len(parts) {
		t.Errorf("stored by partition, %d keys in %d partitions are the subjects %v", len(keys), len(parts), info.State.Subjects)
	}
	// Every message of both forms is read by its partition's filter, in order.
	for p := range 7 {
		cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{cfg.Subjects.EventsStored(p)}})
		if err != nil {
			t.Fatal(err)
		}
		want := 0
		for _, k := range keys {
			if pipeline.PartitionOf(k, 7) == p {
				want += 4
			}
		}
		last := uint64(0)
		for range want {
			m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
			if err != nil {
				t.Fatalf("partition %d: %v", p, err)
			}
			md, _ := m.Metadata()
			if md.Sequence.Stream <= last {
				t.Fatalf("partition %d: message %d after %d", p, md.Sequence.Stream, last)
			}
			last = md.Sequence.Stream
		}
	}
	cfg.Partitions = 8
	if err := pipeline.Setup(ctx, js, cfg); !errors.Is(err, pipeline.ErrPartitions) {
		t.Fatalf("changing the partition count: err=%v, want ErrPartitions", err)
	}
	// A malformed subject has no stream: the producer is told, nothing is stored silently.
	if _, err := js.Publish(ctx, "tally.ev.like", []byte("x")); err == nil {
		t.Fatal("publish to tally.ev.like (no key) succeeded")
	}
}

func TestDecodeEvents(t *testing.T) {
	fams := pipeline.Families(pipeline.DefaultFamilies())
	f := func(t *testing.T, typ, body string, want pipeline.Event, wantErr string) {
		t.Helper()
		evs, _, err := pipeline.DecodeEvents(typ, []byte(body), nil, fams)
		if wantErr != "" {
			if err == nil || !errors.Is(err, pipeline.ErrBadEvent) || !contains(err.Error(), wantErr) {
				t.Fatalf("%s %s: err=%v, want ErrBadEvent containing %q", typ, body, err, wantErr)
			}
			return
		}
		if err != nil {
			t.Fatalf("%s %s: %v", typ, body, err)
		}
		if len(evs) != 1 || fmt.Sprint(evs[0]) != fmt.Sprint(want) {
			t.Fatalf("%s %s: got %+v want %+v", typ, body, evs, want)
		}
	}
	f(t, "like", `{"uid":7,"post":"18446744073709551615"}`, pipeline.Event{Type: "like", UID: 7, Post: 18446744073709551615}, "")
	f(t, "like", `{"uid":"7","post":9,"owner":3,"ts":5,"tx":"a"}`, pipeline.Event{Type: "like", Tx: "a", UID: 7, Post: 9, Owner: 3, TS: 5}, "")
	f(t, "view", `{"post":9,"n":10}`, pipeline.Event{Type: "view", Post: 9, N: 10}, "")
	f(t, "incr", `{"family":"post","id":9,"field":"view","n":-2}`, pipeline.Event{Type: "incr", Family: "post", ID: 9, Field: "view", N: -2}, "")
	f(t, "like", `{"uid":7}`, pipeline.Event{}, "needs post")
	f(t, "like", `{"uid":-7,"post":1}`, pipeline.Event{}, "not an unsigned")
	f(t, "like", `{"uid":"x7","post":1}`, pipeline.Event{}, "not an unsigned")
	f(t, "like", `{"uid":"18446744073709551616","post":1}`, pipeline.Event{}, "not an unsigned")
	f(t, "like", `{"uid":7,"post":1,"psot":2}`, pipeline.Event{}, "unknown field")
	f(t, "like", `{"type":"view","uid":7,"post":1}`, pipeline.Event{}, "differs")
	f(t, "like", `{"uid":7,"post":1} x`, pipeline.Event{}, "trailing")
	f(t, "poke", `{"uid":7,"post":1}`, pipeline.Event{}, "unknown type")
	f(t, "comment", `{"uid":7,"post":1}`, pipeline.Event{}, "needs comment")
	f(t, "follow", `{"uid":7,"target":7}`, pipeline.Event{}, "themself")
	f(t, "read", `{"uid":7,"kinds":["like","spam"]}`, pipeline.Event{}, "spam")
	f(t, "incr", `{"family":"video","id":9,"field":"view","n":1}`, pipeline.Event{}, "unknown family")
	f(t, "incr", `{"family":"post","id":9,"field":"views","n":1}`, pipeline.Event{}, "unknown field")
	f(t, "view", `{"post":9,"n":-1}`, pipeline.Event{}, "out of range")
	f(t, "like", "\xff\x00garbage", pipeline.Event{}, "cannot decode")
	f(t, "like", "", pipeline.Event{}, "empty payload")
}

func TestDecodeBatchMsgpack(t *testing.T) {
	fams := pipeline.Families(pipeline.DefaultFamilies())
	b := pipeline.Batch{Events: []pipeline.Event{
		{Type: "like", UID: 1, Post: 2}, {Type: "view", Post: 2, N: 3},
	}}
	data, err := pipeline.Marshal(&b, false)
	if err != nil {
		t.Fatal(err)
	}
	evs, bad, err := pipeline.DecodeEvents("batch", data, nil, fams)
	if err != nil || len(bad) != 0 || len(evs) != 2 || evs[1].N != 3 || evs[0].Post != 2 {
		t.Fatalf("batch round trip: %+v %v", evs, err)
	}
	big := pipeline.Batch{Events: make([]pipeline.Event, pipeline.MaxBatch+1)}
	for i := range big.Events {
		big.Events[i] = pipeline.Event{Type: "view", Post: 1}
	}
	data, _ = pipeline.Marshal(&big, false)
	if _, _, err := pipeline.DecodeEvents("batch", data, nil, fams); err == nil || !contains(err.Error(), "at most") {
		t.Fatalf("oversized batch: %v", err)
	}
	mixed := pipeline.Batch{Events: []pipeline.Event{{Type: "view", Post: 1}, {Type: "like", UID: 1}}}
	data, _ = pipeline.Marshal(&mixed, true)
	evs, bad, err = pipeline.DecodeEvents("batch", data, nil, fams)
	if err != nil || len(evs) != 1 || len(bad) != 1 || bad[0].Index != 1 || !errors.Is(bad[0].Err, pipeline.ErrBadEvent) ||
		!contains(bad[0].Err.Error(), "batch event 1") {
		t.Fatalf("batch with a bad event: good %v bad %v err %v", evs, bad, err)
	}
}

func TestDeltaBatchRoundTrip(t *testing.T) {
	in := pipeline.DeltaBatch{Source: 3, Seq: 1 << 50, Deltas: []pipeline.Delta{
		{ID: 1, Field: 0, Op: pipeline.OpAdd, N: 3},
		{ID: 1<<64 - 1, Field: 3, Op: pipeline.OpSet, N: 0},
		{ID: 5, Field: 1, Op: pipeline.OpAdd, N: -2},
	}}
	var out pipeline.DeltaBatch
	if err := pipeline.DecodeDeltaBatch(pipeline.AppendDeltaBatch(nil, &in), &out); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(in) != fmt.Sprint(out) {
		t.Fatalf("got %+v want %+v", out, in)
	}
}

func TestDeltaBatchWindowsRoundTrip(t *testing.T) {
	in := pipeline.DeltaBatch{Source: 1, Seq: 9, Deltas: []pipeline.Delta{{ID: 7, Op: pipeline.OpAdd, N: 1}},
		Windows: []pipeline.WindowDelta{{ID: 7, Field: 0, Minute: 29_000_000, N: 2}, {ID: 7, Field: 0, Minute: 29_000_001, N: -1}}}
	var out pipeline.DeltaBatch
	if err := pipeline.DecodeDeltaBatch(pipeline.AppendDeltaBatch(nil, &in), &out); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(in) != fmt.Sprint(out) {
		t.Fatalf("got %+v want %+v", out, in)
	}
	// Without windows a batch keeps the form readers before 1.4 decode: three elements.
	in.Windows = nil
	if data := pipeline.AppendDeltaBatch(nil, &in); data[0] != 0x93 {
		t.Fatalf("a batch without windows starts %#x, want a 3-element array", data[0])
	}
	// A reused batch forgets the windows of the one before.
	if err := pipeline.DecodeDeltaBatch(pipeline.AppendDeltaBatch(nil, &in), &out); err != nil || len(out.Windows) != 0 {
		t.Fatalf("windows %v err %v, want none", out.Windows, err)
	}
}

func TestDeltaThen(t *testing.T) {
	add := func(n int64) pipeline.Delta { return pipeline.Delta{Op: pipeline.OpAdd, N: n} }
	set := func(n int64) pipeline.Delta { return pipeline.Delta{Op: pipeline.OpSet, N: n} }
	f := func(a, b, want pipeline.Delta, wantOK bool) {
		t.Helper()
		if got, ok := a.Then(b); ok != wantOK || (ok && got != want) {
			t.Fatalf("%+v then %+v = %+v %v, want %+v %v", a, b, got, ok, want, wantOK)
		}
	}
	f(add(1), add(2), add(3), true)
	f(add(-1), add(-2), add(-3), true)
	f(add(0), add(-2), add(-2), true)
	f(add(4), add(0), add(4), true)
	f(add(5), set(0), set(0), true)
	f(add(-5), set(3), set(3), true)
	f(set(0), add(2), set(2), true)
	f(set(1), add(-3), set(0), true)
	f(set(-4), add(3), set(3), true)
	// Item 7: -5 then +5 on a counter at 2 is 5 applied one by one; no single delta is
	// that for every starting value.
	f(add(-5), add(5), pipeline.Delta{}, false)
	f(add(1), add(-1), pipeline.Delta{}, false)
}

func TestWaitForStreams(t *testing.T) {
	// Setup honours a cancelled context instead of hanging.
	s := natstest.Start(t)
	js, _ := jetstream.New(natstest.Connect(t, s))
	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	if err := pipeline.Setup(ctx, js, pipeline.DefaultStreamConfig()); err == nil {
		t.Fatal("Setup with a cancelled context succeeded")
	}
}

func contains(s, sub string) bool { return len(sub) == 0 || indexOf(s, sub) >= 0 }

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

// A producer's batch may not carry the privileged types: a system notice reaches every
// user and an incr any counter, so they need the admin grant (their own subjects, or an
// admin batch that only the admin may publish). The rest of the batch stands.
func TestPrivilegedEventsNeedAnAdminBatch(t *testing.T) {
	fams := pipeline.DefaultFamilies()
	data := []byte(`{"events":[{"type":"view","post":5},{"type":"system","id":1},{"type":"incr","family":"post","id":5,"field":"like","n":9}]}`)
	good, bad, err := pipeline.DecodeEvents(pipeline.TypeBatch, data, nil, fams)
	if err != nil || len(good) != 1 || len(bad) != 2 || bad[0].Index != 1 || bad[1].Index != 2 ||
		!errors.Is(bad[0].Err, pipeline.ErrBadEvent) || !contains(bad[0].Err.Error(), "admin") {
		t.Fatalf("producer batch: good %v, bad %v, err %v", good, bad, err)
	}
	good, bad, err = pipeline.DecodeEvents(pipeline.TypeAdminBatch, data, nil, fams)
	if err != nil || len(good) != 3 || len(bad) != 0 {
		t.Fatalf("admin batch: good %v, bad %v, err %v", good, bad, err)
	}
}
