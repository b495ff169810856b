package hoptest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/stages/hop"
	"github.com/tally-dev/tally/store/delivery"
)

func TestParseFaults(t *testing.T) {
	f := func(t *testing.T, spec string, want Faults, wantErr bool) {
		t.Helper()
		got, err := ParseFaults(spec)
		if wantErr {
			if !errors.Is(err, ErrBadFaults) {
				t.Fatalf("ParseFaults(%q) = %v, want ErrBadFaults", spec, err)
			}
			return
		}
		if err != nil || got != want {
			t.Fatalf("ParseFaults(%q) = %+v, %v; want %+v", spec, got, err, want)
		}
		if back, err := ParseFaults(got.String()); err != nil || back != got {
			t.Fatalf("ParseFaults(%q) = %+v, %v: String does not read back", got.String(), back, err)
		}
	}
	f(t, "", Faults{}, false)
	f(t, "fail=0.05,delay=0.05,reorder=0.05,seed=7", Faults{Fail: 0.05, Delay: 0.05, Reorder: 0.05, Seed: 7}, false)
	f(t, " seed=3 , reorder=1 ", Faults{Reorder: 1, Seed: 3}, false)
	f(t, "delay=0.5,maxdelay=1s", Faults{Delay: 0.5, MaxDelay: time.Second}, false)
	f(t, "lose=0.01,acktimeout=300ms,seed=2", Faults{Lose: 0.01, AckTimeout: 300 * time.Millisecond, Seed: 2}, false)
	f(t, "fail=0.25,delay=0.25,reorder=0.25,lose=0.25", Faults{Fail: 0.25, Delay: 0.25, Reorder: 0.25, Lose: 0.25}, false)
	f(t, "fail", Faults{}, true)
	f(t, "fail=2", Faults{}, true)
	f(t, "fail=-0.1", Faults{}, true)
	f(t, "fail=x", Faults{}, true)
	f(t, "drop=0.1", Faults{}, true)
	f(t, "seed=-1", Faults{}, true)
	f(t, "maxdelay=-1s", Faults{}, true)
	f(t, "fail=0.6,reorder=0.6", Faults{}, true)
	f(t, "fail=0.5,lose=0.6", Faults{}, true)
	f(t, "lose=1.5", Faults{}, true)
	f(t, "acktimeout=-1s", Faults{}, true)
	f(t, "acktimeout=soon", Faults{}, true)
}

// fakeJS stores every message it is given, in order, and acknowledges it at once
// (failing when fail says so).
type fakeJS struct {
	mu     sync.Mutex
	stored []string // message ids, in the order published
	fail   func(id string) error
}

func (j *fakeJS) PublishMsgAsync(msg *nats.Msg, _ ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	id := msg.Header.Get(jetstream.MsgIDHeader)
	fut := newFuture(msg)
	if j.fail != nil {
		if err := j.fail(id); err != nil {
			fut.fail(err)
			return fut, nil
		}
	}
	j.mu.Lock()
	j.stored = append(j.stored, id)
	n := len(j.stored)
	j.mu.Unlock()
	fut.ok <- &jetstream.PubAck{Stream: "S", Sequence: uint64(n)}
	return fut, nil
}

func (j *fakeJS) ids() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.stored)
}

func msgN(i int) *nats.Msg {
	return &nats.Msg{Subject: "s", Header: nats.Header{jetstream.MsgIDHeader: []string{fmt.Sprint(i)}}}
}

// outcome publishes n messages and settles every future: "ok", "err" (at once) or
// "failed" (through the future), per message.
func outcome(t *testing.T, p *FaultyPublisher, n int) []string {
	t.Helper()
	futs := make([]jetstream.PubAckFuture, n)
	out := make([]string, n)
	for i := range n {
		fut, err := p.PublishMsgAsync(msgN(i))
		if err != nil {
			if !errors.Is(err, ErrInjected) {
				t.Fatalf("publish %d: %v, want ErrInjected", i, err)
			}
			out[i] = "err"
			continue
		}
		futs[i] = fut
	}
	for i, fut := range futs {
		if fut == nil {
			continue
		}
		select {
		case <-fut.Ok():
			out[i] = "ok"
		case err := <-fut.Err():
			if !errors.Is(err, ErrInjected) {
				t.Fatalf("future %d: %v, want ErrInjected", i, err)
			}
			out[i] = "failed"
		case <-time.After(time.Minute): // synctest: only when every goroutine is stuck
			t.Fatalf("future %d never settled", i)
		}
	}
	return out
}

func TestFaultyPublisherNoFaults(t *testing.T) {
	js := &fakeJS{}
	p := NewFaultyPublisher(js, Faults{Seed: 1})
	out := outcome(t, p, 100)
	for i, o := range out {
		if o != "ok" {
			t.Fatalf("publish %d: %s with no faults", i, o)
		}
	}
	want := make([]string, 100)
	for i := range want {
		want[i] = fmt.Sprint(i)
	}
	if got := js.ids(); !slices.Equal(got, want) {
		t.Fatalf("stored %v, want every message once in order", got)
	}
}

// Every publish fails, in each of the three ways; those whose ack is lost were stored.
func TestFaultyPublisherFail(t *testing.T) {
	js := &fakeJS{}
	p := NewFaultyPublisher(js, Faults{Fail: 1, Seed: 2})
	out := outcome(t, p, 300)
	count := map[string]int{}
	for _, o := range out {
		count[o]++
	}
	st := &p.Stats
	if count["ok"] != 0 || count["err"] < 50 || count["failed"] < 150 || st.Failed.Load() != 300 {
		t.Fatalf("outcomes %v, %d failed: want none ok, some errors at once, the rest failed futures", count, st.Failed.Load())
	}
	if n := len(js.ids()); n != int(st.AckLost.Load()) || n < 50 || n > 150 {
		t.Fatalf("%d stored with %d acks lost: every lost ack is a stored message, about a third", n, st.AckLost.Load())
	}
}

// Delayed acks settle only once time passes, all of them ok.
func TestFaultyPublisherDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		js := &fakeJS{}
		p := NewFaultyPublisher(js, Faults{Delay: 1, Seed: 3, MaxDelay: time.Second})
		defer p.Close()
		start := time.Now()
		fut, err := p.PublishMsgAsync(msgN(1))
		if err != nil {
			t.Fatal(err)
		}
		out := outcome(t, p, 50)
		if slices.ContainsFunc(out, func(o string) bool { return o != "ok" }) {
			t.Fatalf("delayed publishes: %v, want every one ok", out)
		}
		<-fut.Ok()
		if time.Since(start) == 0 || time.Since(start) > time.Second {
			t.Fatalf("acks took %v, want a delay of at most 1s", time.Since(start))
		}
		if p.Stats.Delayed.Load() != 51 || len(js.ids()) != 51 {
			t.Fatalf("%d delayed, %d stored, want 51 each", p.Stats.Delayed.Load(), len(js.ids()))
		}
	})
}

// Reordered messages are stored after later ones — or after MaxDelay when none comes —
// each exactly once, and their futures settle ok.
func TestFaultyPublisherReorder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		js := &fakeJS{}
		p := NewFaultyPublisher(js, Faults{Reorder: 0.3, Seed: 4})
		defer p.Close()
		out := outcome(t, p, 200)
		if slices.ContainsFunc(out, func(o string) bool { return o != "ok" }) {
			t.Fatalf("reordered publishes: %v, want every one ok", out)
		}
		got := js.ids()
		if distinct := len(slices.Compact(slices.Sorted(slices.Values(got)))); len(got) != 200 || distinct != 200 {
			t.Fatalf("stored %d messages (%d distinct), want 200 once each", len(got), distinct)
		}
		inversions := 0
		pos := map[string]int{}
		for i, id := range got {
			pos[id] = i
		}
		for i := 1; i < 200; i++ {
			if pos[fmt.Sprint(i)] < pos[fmt.Sprint(i-1)] {
				inversions++
			}
		}
		if n := p.Stats.Reordered.Load(); inversions == 0 || n < 30 || n > 100 {
			t.Fatalf("%d held, %d messages stored before the one published just before them: want about 60 held, reordered", n, inversions)
		}

		// A message held with none after it goes out after MaxDelay.
		p2 := NewFaultyPublisher(&fakeJS{}, Faults{Reorder: 1, Seed: 5, MaxDelay: 300 * time.Millisecond})
		defer p2.Close()
		start := time.Now()
		if out := outcome(t, p2, 3); !slices.Equal(out, []string{"ok", "ok", "ok"}) {
			t.Fatalf("held publishes: %v", out)
		}
		if d := time.Since(start); d != 300*time.Millisecond {
			t.Fatalf("held messages released after %v, want MaxDelay (300ms)", d)
		}
	})
}

// The same seed makes the same faults for the same publishes.
func TestFaultyPublisherRepeatable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		run := func() ([]string, []string) {
			js := &fakeJS{}
			p := NewFaultyPublisher(js, Faults{Fail: 0.2, Reorder: 0.2, Delay: 0.2, Seed: 9})
			defer p.Close()
			out := outcome(t, p, 100)
			return out, js.ids()
		}
		out1, ids1 := run()
		out2, ids2 := run()
		if !slices.Equal(out1, out2) || !slices.Equal(ids1, ids2) {
			t.Fatalf("two runs with one seed differ:\n%v\n%v", out1, out2)
		}
	})
}

// A failure of the wrapped publisher reaches the caller; a stream lookup is passed on.
func TestFaultyPublisherPassesErrorsOn(t *testing.T) {
	boom := errors.New("boom")
	js := &fakeJS{fail: func(string) error { return boom }}
	p := NewFaultyPublisher(js, Faults{Reorder: 0.5, Delay: 0.5, Seed: 6})
	defer p.Close()
	for i := range 20 {
		fut, err := p.PublishMsgAsync(msgN(i))
		if err != nil {
			t.Fatal(err)
		}
		if i == 19 {
			p.release()
		}
		defer func() {
			if err := <-fut.Err(); !errors.Is(err, boom) {
				t.Errorf("future %d: %v, want the wrapped publisher's error", i, err)
			}
		}()
	}
	if _, err := p.StreamNameBySubject(t.Context(), "x"); !errors.Is(err, errNoFinder) {
		t.Fatalf("StreamNameBySubject of a non-finder: %v", err)
	}
}

// Lost publishes are never sent and their futures never settle, not even on Close; the
// others go through.
func TestFaultyPublisherLose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		js := &fakeJS{}
		p := NewFaultyPublisher(js, Faults{Lose: 0.3, Seed: 8})
		var lost []jetstream.PubAckFuture
		for i := range 200 {
			fut, err := p.PublishMsgAsync(msgN(i))
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-fut.Ok():
			default:
				lost = append(lost, fut)
			}
		}
		p.Close()
		synctest.Wait()
		for _, fut := range lost {
			select {
			case <-fut.Ok():
				t.Fatal("a lost publish was acknowledged")
			case err := <-fut.Err():
				t.Fatalf("a lost publish failed: %v", err)
			default:
			}
		}
		n := int(p.Stats.Lost.Load())
		if len(lost) != n || n < 30 || n > 90 || len(js.ids()) != 200-n {
			t.Fatalf("%d futures unsettled, %d lost, %d stored: want about 60 lost and the rest stored", len(lost), n, len(js.ids()))
		}
		if got := p.AckTimeout(); got != DefaultLostAckTimeout {
			t.Fatalf("AckTimeout %v, want DefaultLostAckTimeout when losing without acktimeout", got)
		}
	})
}

// An Outbox takes its AckTimeout from a FaultyPublisher that sets one, and finds a lost
// publish after it.
func TestOutboxAckTimeoutOfPublisher(t *testing.T) {
	f := func(t *testing.T, faults Faults, opts hop.OutboxOptions, want time.Duration) {
		t.Helper()
		synctest.Test(t, func(t *testing.T) {
			js := &fakeJS{}
			p := NewFaultyPublisher(js, faults)
			defer p.Close()
			o := hop.NewOutbox(p, opts)
			start := time.Now()
			if err := o.Send(t.Context(), []delivery.OutboxEntry{{Seq: 1, Subject: "s", MsgID: "1"}}); err != nil {
				t.Fatal(err)
			}
			p.f.Lose = 0 // the publish sent again goes through
			if err := o.Reap(t.Context(), true); err != nil {
				t.Fatal(err)
			}
			// A lost publish is sent again after AckTimeout and the first backoff (50 ms to
			// three times it, jittered: pipeline/backoff).
			if got := time.Since(start); got < want+50*time.Millisecond || got > want+150*time.Millisecond || len(js.ids()) != 1 {
				t.Fatalf("stored %v after %v, want once after %v plus 50 to 150 ms", js.ids(), got, want)
			}
		})
	}
	f(t, Faults{Lose: 1, AckTimeout: 300 * time.Millisecond}, hop.OutboxOptions{}, 300*time.Millisecond)
	f(t, Faults{Lose: 1}, hop.OutboxOptions{}, DefaultLostAckTimeout)
	f(t, Faults{Lose: 1, AckTimeout: 300 * time.Millisecond}, hop.OutboxOptions{AckTimeout: 2 * time.Second}, 2*time.Second)
}

// An Outbox through a FaultyPublisher with every fault stores every entry — some twice,
// under the same message id, where an ack was lost — and reports each published once;
// lost publishes are found by the AckTimeout the FaultyPublisher gives it.
func TestOutboxThroughFaults(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		js := &fakeJS{}
		p := NewFaultyPublisher(js, Faults{Fail: 0.2, Delay: 0.2, Reorder: 0.2, Lose: 0.1, Seed: 11})
		defer p.Close()
		o := hop.NewOutbox(p, hop.OutboxOptions{MaxInflight: 16})
		var entries []delivery.OutboxEntry
		for i := range 500 {
			entries = append(entries, delivery.OutboxEntry{Seq: uint64(i + 1), Subject: "s", MsgID: fmt.Sprint(i)})
		}
		for i := 0; i < len(entries); i += 50 {
			if err := o.Send(t.Context(), entries[i:i+50]); err != nil {
				t.Fatal(err)
			}
		}
		if err := o.Reap(t.Context(), true); err != nil {
			t.Fatal(err)
		}
		published := o.Published()
		slices.Sort(published)
		if len(published) != 500 || published[0] != 1 || published[499] != 500 || len(slices.Compact(published)) != 500 {
			t.Fatalf("%d entries reported published, want 500 once each", len(published))
		}
		stored := js.ids()
		if distinct := len(slices.Compact(slices.Sorted(slices.Values(stored)))); distinct != 500 {
			t.Fatalf("%d distinct entries stored, want 500", distinct)
		}
		st := &p.Stats
		if st.Failed.Load() < 50 || st.Delayed.Load() < 50 || st.Reordered.Load() < 50 || st.Lost.Load() < 25 || len(stored) == 500 {
			t.Fatalf("faults: %d failed (%d acks lost), %d delayed, %d reordered, %d lost; %d stored: want each fault, some stored twice",
				st.Failed.Load(), st.AckLost.Load(), st.Delayed.Load(), st.Reordered.Load(), st.Lost.Load(), len(stored))
		}
	})
}
