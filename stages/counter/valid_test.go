package counter_test

import (
	"context"
	"errors"
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
	"github.com/tally-dev/tally/store/checkpoint"
	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/cold/coldtest"
)

// A worker whose partition may belong to another process by now (Valid false: its lease
// was not renewed in time) still applies and checkpoints locally, but answers no query
// and publishes no change event: neither a reader nor a watcher's mirror may take its
// counts over the new owner's.
func TestInvalidWorkerPublishesNoChange(t *testing.T) {
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
	db := coldtest.Open(t, cold.Options{})
	fam, _ := pipeline.Families(pipeline.DefaultFamilies()).Lookup(pipeline.FamilyPost)
	var valid atomic.Bool
	valid.Store(true)
	w := counter.New(counter.Config{Family: fam, Partition: 0, Subjects: sc.Subjects, FlushInterval: 10 * time.Millisecond, Valid: valid.Load},
		js, db, slog.New(slog.DiscardHandler), &counter.Stats{})
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	defer func() { stop(); <-done }()

	seq := uint64(0)
	like := func(id uint64) {
		seq++
		b := pipeline.DeltaBatch{Source: 0, Seq: seq, Deltas: []pipeline.Delta{{ID: id, Field: 0, Op: pipeline.OpAdd, N: 1}}}
		msg := &nats.Msg{Subject: sc.Subjects.Delta(fam.Name, 0), Data: pipeline.AppendDeltaBatch(nil, &b),
			Header: nats.Header{jetstream.MsgIDHeader: []string{fmt.Sprint("d", seq)}}}
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	changes := func() uint64 {
		st, err := js.Stream(ctx, sc.Subjects.ChangesStream())
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs
	}
	checkpointed := func(pos uint64) func() (bool, string) {
		return func() (bool, string) {
			cp, err := checkpoint.LoadCheckpoint(db, fam.Name, 0)
			return err == nil && cp.Pos >= pos, fmt.Sprint("checkpoint at ", cp.Pos, " ", err)
		}
	}
	like(7)
	natstest.Eventually(t, 5*time.Second, "a change event while owned", func() (bool, string) {
		return changes() == 1, fmt.Sprint(changes(), " change events")
	})
	valid.Store(false)
	like(7)
	natstest.Eventually(t, 5*time.Second, "the second like checkpointed", checkpointed(2))
	time.Sleep(50 * time.Millisecond) // a flush or two more
	if n := changes(); n != 1 {
		t.Fatalf("%d change events, want only the one sent while the partition was certainly owned", n)
	}
	out := [][]uint64{make([]uint64, len(fam.Fields))}
	if err := w.Get(ctx, []uint64{7}, out); !errors.Is(err, counter.ErrNotOwned) {
		t.Fatalf("query to a partition not certainly owned: %v, want ErrNotOwned", err)
	}
	if err := checkpoint.Counts(db, fam.Name, 0, []uint64{7}, out); err != nil || out[0][0] != 2 {
		t.Fatalf("likes of 7 checkpointed: %v, %v; want 2 applied locally", out[0], err)
	}
}
