package query_test

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/natstest"
	"github.com/tally-dev/tally/stages/flow"
	"github.com/tally-dev/tally/stages/query"
)

// windowPart stands in for a counter worker with windows: field 0 of every id answers
// the first minute asked, field 1 minus the id.
type windowPart struct{}

func (windowPart) Get(context.Context, []uint64, [][]uint64) error { return nil }
func (windowPart) GetWindow(_ context.Context, ids []uint64, since uint32, out [][]int64) error {
	for i, id := range ids {
		out[i][0], out[i][1] = int64(since), -int64(id)
	}
	return nil
}
func (windowPart) Ready() bool                                 { return true }
func (windowPart) Behind(context.Context) (flow.Behind, error) { return flow.Behind{}, nil }

// TestGetWindowAcrossProcesses: a windowed get of ids in partitions of two processes is
// answered for the same minutes by each — those where it arrived — with signed changes
// and the window named, whether the other process is asked for each partition or, once
// learned, for both at once (peers.go).
func TestGetWindowAcrossProcesses(t *testing.T) {
	const n = 4
	s := natstest.Start(t)
	var peerGets atomic.Int64
	start := func(owned ...int) {
		parts := make([]query.Partition, n)
		for _, p := range owned {
			parts[p] = windowPart{}
		}
		srv := query.New(query.Config{Subjects: pipeline.NewSubjects(""), Families: pipeline.DefaultFamilies(), Partitions: n, Timeout: 10 * time.Second,
			OnQuery: func(kind string, _ time.Duration, failed bool) {
				if kind == "peer" && !failed {
					peerGets.Add(1)
				}
			}},
			natstest.Connect(t, s), nil, map[string][]query.Partition{"post": parts}, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Stop)
	}
	start(0, 1)
	start(2, 3)
	nc := natstest.Connect(t, s)
	ids := []pipeline.ID{1, 2, 3, 4, 5, 6, 7, 8}
	data, err := pipeline.Marshal(pipeline.GetRequest{IDs: ids, Window: "1h"}, true)
	if err != nil {
		t.Fatal(err)
	}
	for range 20 { // each server takes some of the requests
		before := pipeline.WindowSince(time.Now(), 60)
		m, err := nc.Request("tally.get.post", data, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		after := pipeline.WindowSince(time.Now(), 60)
		var r pipeline.GetReply
		if err := pipeline.UnmarshalReply(m.Data, true, &r); err != nil {
			t.Fatal(err)
		}
		if r.Error != "" || r.Window != "1h" || len(r.Changes) != len(ids) || len(r.Unavailable) != 0 || r.Counts != nil {
			t.Fatalf("reply %s", m.Data)
		}
		since := r.Changes[0][0]
		if since < int64(before) || since > int64(after) {
			t.Fatalf("window from minute %d, asked between %d and %d", since, before, after)
		}
		for i, c := range r.Changes {
			if c[0] != since || c[1] != -int64(ids[i]) {
				t.Fatalf("id %d: changes %v, want [%d %d 0 0] (the same minutes in every partition)", ids[i], c, since, -int64(ids[i]))
			}
		}
	}
	if peerGets.Load() == 0 {
		t.Error("20 windowed gets, and no process was asked for the other's two partitions at once")
	}
}
