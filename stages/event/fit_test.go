package event

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/cold/coldtest"
	"github.com/tally-dev/tally/store/graph"
)

// A transaction takes what Badger accepts, by Badger's own checks: with a database
// whose transactions hold about one message of 300 likes, a backlog of such messages
// commits the ones that fit and goes on, and a message that alone does not fit is
// dead-lettered while the partition goes on. Nothing is lost or counted twice: the
// deltas sent add up to the likes of the messages that fit, and the stats count each
// event, message and dead letter once, however many attempts were thrown away (an
// attempt too big counted them as well as the one that committed).
func TestTransactionsThatFit(t *testing.T) {
	h := newLogHarness(t)
	db := coldtest.Open(t, cold.Options{MemTableSize: 1 << 20})
	const msgs, per, huge = 12, 300, 3000
	uid := 1
	batch := func(n int, bad bool) {
		evs := make([]pipeline.Event, n)
		for i := range evs {
			evs[i] = pipeline.Event{Type: pipeline.TypeLike, UID: pipeline.ID(uid), Post: 7}
			uid++
		}
		if bad { // a like of no post: dead-lettered alone
			evs = append(evs, pipeline.Event{Type: pipeline.TypeLike, UID: 1})
		}
		data, _ := pipeline.Marshal(&pipeline.Batch{Events: evs}, false)
		h.tx++
		if _, err := h.js.Publish(context.Background(), h.sj.Event(pipeline.TypeBatch, 1), data, jetstream.WithMsgID(fmt.Sprint("b", h.tx))); err != nil {
			t.Fatal(err)
		}
	}
	for i := range msgs {
		if i == msgs/2 {
			batch(huge, false)
		}
		batch(per, i == msgs/2-1)
	}
	r := h.start("o1", db)
	h.caughtUp(r)
	if got := r.stats.Splits.Load(); got == 0 {
		t.Fatal("no transaction was cut short: the test does not reach Badger's bound")
	}
	if got := r.stats.Dead.Load(); got != 2 {
		t.Fatalf("%d dead letters, want the one message too large for a transaction and the like of no post", got)
	}
	if got, likes, m := r.stats.Events.Load(), r.stats.ByType[pipeline.TypeLike].Load(), r.stats.Messages.Load(); got != msgs*per || likes != msgs*per || m != msgs+1 {
		t.Fatalf("%d events, %d likes, %d messages counted; want %d, %d, %d", got, likes, m, msgs*per, msgs*per, msgs+1)
	}
	if got, want := sumDeltas(t, h.js, h.sj), int64(msgs*per); got != want {
		t.Fatalf("deltas add up to %d likes, want %d", got, want)
	}
	// The dead-lettered message's likes were not made; the others were.
	liked, err := graph.Related(db, 0, graph.Like, uint64(msgs/2*per+1), []uint64{7})
	if err != nil || liked[0] {
		t.Fatalf("a like of the dead-lettered message was made: %v %v", liked, err)
	}
	liked, err = graph.Related(db, 0, graph.Like, uint64(msgs/2*per+huge+1), []uint64{7})
	if err != nil || !liked[0] {
		t.Fatalf("a like after the dead-lettered message is missing: %v %v", liked, err)
	}
	t.Logf("%d messages in %d transactions (%d cut short)", msgs+1, r.stats.Txns.Load(), r.stats.Splits.Load())
}

// A transaction stops taking messages while what they make still fits (work.full): a
// backlog of messages that fit a few at a time commits without an attempt thrown away.
// Before, each transaction took every message read ahead, and one that did not fit was
// discarded and done again with half of them: a batch not split by partition makes a
// hop batch of hundreds of events for each partition, and the attempts thrown away took
// a fifth of the CPU of a run of them (BenchmarkJSON/unsplit).
func TestBacklogCommitsWithoutWorkThrownAway(t *testing.T) {
	h := newLogHarness(t)
	db := coldtest.Open(t, cold.Options{MemTableSize: 1 << 20})
	const msgs, per = 80, 100
	for m := range msgs {
		evs := make([]pipeline.Event, per)
		for i := range evs { // each like by a user of its own, of one of 50 posts
			evs[i] = pipeline.Event{Type: pipeline.TypeLike, UID: pipeline.ID(1 + m*per + i), Post: pipeline.ID(1 + i%50)}
		}
		data, _ := pipeline.Marshal(&pipeline.Batch{Events: evs}, false)
		if _, err := h.js.Publish(context.Background(), h.sj.Event(pipeline.TypeBatch, 1), data, jetstream.WithMsgID(fmt.Sprint("m", m))); err != nil {
			t.Fatal(err)
		}
	}
	r := h.start("o1", db)
	h.caughtUp(r)
	if got := r.stats.Txns.Load(); got < 4 {
		t.Fatalf("%d transactions: the backlog fits in too few for the test", got)
	}
	if got := r.stats.Splits.Load(); got != 0 {
		t.Fatalf("%d attempts thrown away and cut (of %d transactions), want none", got, r.stats.Txns.Load())
	}
	if got, want := sumDeltas(t, h.js, h.sj), int64(msgs*per); got != want {
		t.Fatalf("deltas add up to %d likes, want %d", got, want)
	}
	t.Logf("%d messages in %d transactions", msgs, r.stats.Txns.Load())
}

// sumDeltas adds up every delta in the deltas stream.
func sumDeltas(t *testing.T, js jetstream.JetStream, sj pipeline.Subjects) int64 {
	t.Helper()
	ctx := context.Background()
	cons, err := js.OrderedConsumer(ctx, sj.DeltasStream(), jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	var b pipeline.DeltaBatch
	for {
		m, err := cons.Next(jetstream.FetchMaxWait(500 * time.Millisecond))
		if errors.Is(err, jetstream.ErrNoMessages) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) {
			return sum
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := pipeline.DecodeDeltaBatch(m.Data(), &b); err != nil {
			t.Fatal(err)
		}
		for _, d := range b.Deltas {
			sum += d.N
		}
	}
}
