package counter_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/natstest"
	"github.com/tally-dev/tally/stages/counter"
	"github.com/tally-dev/tally/store/cold"
)

// A standby's worker applies the partition's deltas beside its owner's and keeps only
// the change events the owner has not stored yet; taking over, it sends those, and the
// changes stream's last value of every id is its true count.
func TestStandbyWorkerTrimsAnnounced(t *testing.T) {
	nc := natstest.Connect(t, natstest.Start(t))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sc := pipeline.DefaultStreamConfig()
	sc.Partitions = 1
	if err := pipeline.Setup(ctx, js, sc); err != nil {
		t.Fatal(err)
	}
	fam, _ := pipeline.Families(pipeline.DefaultFamilies()).Lookup(pipeline.FamilyPost)
	run := func(valid func() bool) (*cold.DB, func()) {
		db, err := cold.Open(cold.Options{Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		w := counter.New(counter.Config{Family: fam, Partition: 0, Subjects: sc.Subjects, FlushInterval: 10 * time.Millisecond, Valid: valid},
			js, db, slog.New(slog.DiscardHandler), &counter.Stats{})
		wctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- w.Run(wctx) }()
		var once atomic.Bool
		halt := func() {
			if once.CompareAndSwap(false, true) {
				stop()
				if err := <-done; err != nil {
					t.Error(err)
				}
				db.Close()
			}
		}
		t.Cleanup(halt)
		return db, halt
	}
	_, stopOwner := run(func() bool { return true })
	var promoted atomic.Bool
	standby, _ := run(promoted.Load)

	want := map[uint64]uint64{}
	seq := uint64(0)
	like := func(id uint64) {
		seq++
		want[id]++
		b := pipeline.DeltaBatch{Source: 0, Seq: seq, Deltas: []pipeline.Delta{{ID: id, Field: 0, Op: pipeline.OpAdd, N: 1}}}
		msg := &nats.Msg{Subject: sc.Subjects.Delta(fam.Name, 0), Data: pipeline.AppendDeltaBatch(nil, &b),
			Header: nats.Header{jetstream.MsgIDHeader: []string{fmt.Sprint("d", seq)}}}
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	outbox := func() int {
		left, err := cold.LoadChanges(standby, fam.Name, 0)
		if err != nil {
			t.Fatal(err)
		}
		return len(left)
	}
	// A like every poll: each checkpoint leaves change events, which the standby drops
	// once the owner's are stored.
	grew := 0
	natstest.Eventually(t, 15*time.Second, "the standby's outbox trimmed", func() (bool, string) {
		like(uint64(1 + seq%5))
		grew = max(grew, outbox())
		return seq > 60 && outbox() <= 3, fmt.Sprintf("%d change events in the standby's outbox after %d likes", outbox(), seq)
	})
	if grew < 2 {
		t.Fatalf("the standby's outbox never held more than %d events: nothing was tried", grew)
	}

	// The owner stops; the standby takes over and sends what it kept.
	stopOwner()
	like(7)
	like(1)
	promoted.Store(true)
	natstest.Eventually(t, 10*time.Second, "the changes stream's last values are the counts", func() (bool, string) {
		last := lastValues(t, js, sc.Subjects, fam.Name)
		for id, n := range want {
			if last[id] != n {
				return false, fmt.Sprintf("id %d: last change %d, count %d", id, last[id], n)
			}
		}
		return true, ""
	})
}

// lastValues reads the changes stream of family whole and keeps the last value of the
// first field of each id, as a mirror does.
func lastValues(t *testing.T, js jetstream.JetStream, sj pipeline.Subjects, family string) map[uint64]uint64 {
	ctx := context.Background()
	cons, err := js.OrderedConsumer(ctx, sj.ChangesStream(), jetstream.OrderedConsumerConfig{FilterSubjects: []string{sj.Changes(family)}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, sj.ChangesStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	last := map[uint64]uint64{}
	for read := uint64(0); read < info.State.Msgs; read++ {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var ch pipeline.Change
		if err := pipeline.Unmarshal(m.Data(), false, &ch); err != nil {
			t.Fatal(err)
		}
		for i, id := range ch.IDs {
			last[uint64(id)] = ch.Counts[i][0]
		}
	}
	return last
}
