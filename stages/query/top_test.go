package query_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/natstest"
	"github.com/tally-dev/tally/stages/flow"
	"github.com/tally-dev/tally/stages/query"
	"github.com/tally-dev/tally/store/window"
)

// topPart stands in for a counter worker's partition p of 4 with windows: its ids are
// those of 1..200 in p; id i changed by i%37 in field 0, nothing in the others.
type topPart struct{ p int }

func (topPart) Get(context.Context, []uint64, [][]uint64) error { return nil }
func (t topPart) Top(_ context.Context, f uint8, _, _ uint32, k int) ([]window.Ranked, error) {
	var all []window.Ranked
	for i := uint64(1); i <= 200; i++ {
		if n := int64(i % 37); f == 0 && n > 0 && pipeline.PartitionOf(pipeline.ID(i), 4) == t.p {
			all = append(all, window.Ranked{ID: i, N: n})
		}
	}
	return window.Merge(k, all), nil
}
func (topPart) Ready() bool                                 { return true }
func (topPart) Behind(context.Context) (flow.Behind, error) { return flow.Behind{}, nil }

// TestTopAcrossProcesses: a top of ids in partitions of two processes is the exact top
// of them all, for the same minutes, ties by id, whether the other process is asked for
// each partition or, once learned, for the top of both at once (peers.go), and after a
// partition it served moved to a third; a partition owned by no process makes it
// unavailable, not shorter; bad requests name what is wrong.
func TestTopAcrossProcesses(t *testing.T) {
	const n = 4
	s := natstest.Start(t)
	var peerTops atomic.Int64
	start := func(owned ...int) *query.Server {
		parts := make([]query.Partition, n)
		for _, p := range owned {
			parts[p] = topPart{p}
		}
		return startTops(t, s, parts, 100*time.Millisecond, func(kind string, _ time.Duration, failed bool) {
			if kind == "peer" && !failed {
				peerTops.Add(1)
			}
		})
	}
	start(0, 1)
	other := start(2, 3)
	nc := natstest.Connect(t, s)
	ask := func(req string) pipeline.TopReply { t.Helper(); return askTop(t, nc, req) }
	exact := func(k int) { t.Helper(); exactTop(t, nc, k) }
	for _, k := range []int{1, 7, 100, 1000} {
		for range 4 { // each server takes some of the requests
			exact(k)
		}
	}
	if peerTops.Load() == 0 {
		t.Error("16 tops, and no process was asked for the top of the other's two partitions at once")
	}
	// Partition 3 moves to a third process: the one asked for 2 and 3 ranks 2 and names 3
	// missing, which is asked on its subject.
	other.SetOwner("post", 3, nil)
	start(3)
	for range 8 {
		exact(7)
	}
	for req, wantErr := range map[string]string{
		`{"field":"nope","window":"1h"}`:              "nope",
		`{"field":"viewers","window":"1h"}`:           "no window",
		`{"field":"like","window":"2h"}`:              `window "2h"`,
		`{"field":"like","window":"1h","limit":1001}`: "limit 1001",
		`{"field":"like","window":"1h","limits":1}`:   `unknown field "limits"`,
		`{"field":"like","window":"1h","limit":-1}`:   "limit -1",
	} {
		if r := ask(req); r.Code != pipeline.CodeBadRequest || !strings.Contains(r.Error, wantErr) {
			t.Errorf("%s: %+v, want a bad request naming %q", req, r, wantErr)
		}
	}
	other.Stop()
	if r := ask(`{"field":"like","window":"1h"}`); r.Code != pipeline.CodeUnavailable || len(r.IDs) != 0 {
		t.Errorf("a top with two partitions owned by nobody: %+v, want unavailable", r)
	}
}

// startTops starts a query server of 4 partitions of post, parts those registered here,
// with Config.HandOver handOver and OnQuery onQuery.
func startTops(t *testing.T, s *server.Server, parts []query.Partition, handOver time.Duration, onQuery func(string, time.Duration, bool)) *query.Server {
	fams := pipeline.WithViewers(pipeline.DefaultFamilies())
	srv := query.New(query.Config{Subjects: pipeline.NewSubjects(""), Families: fams, Partitions: len(parts), Timeout: 10 * time.Second, HandOver: handOver, OnQuery: onQuery},
		natstest.Connect(t, s), nil, map[string][]query.Partition{"post": parts}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return srv
}

// askTop asks tally.top.post with the JSON request req.
func askTop(t *testing.T, nc *nats.Conn, req string) pipeline.TopReply {
	t.Helper()
	m, err := nc.Request("tally.top.post", []byte(req), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var r pipeline.TopReply
	if err := pipeline.UnmarshalReply(m.Data, true, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// exactTop asks the top k of like over the hour of topParts 0..3 and checks it.
func exactTop(t *testing.T, nc *nats.Conn, k int) {
	t.Helper()
	r := askTop(t, nc, fmt.Sprintf(`{"field":"like","window":"1h","limit":%d}`, k))
	if r.Error != "" {
		t.Fatalf("limit %d: %s", k, r.Error)
	}
	var want, got []window.Ranked
	for i := uint64(1); i <= 200; i++ {
		if n := int64(i % 37); n > 0 { // a change of 0 is not ranked
			want = append(want, window.Ranked{ID: i, N: n})
		}
	}
	for i, id := range r.IDs {
		got = append(got, window.Ranked{ID: uint64(id), N: r.Changes[i]})
	}
	if want = window.Merge(k, want); !slices.Equal(got, want) {
		t.Fatalf("limit %d: %d ranked, first %v, want %d, first %v", k, len(got), got[:min(3, len(got))], len(want), want[:min(3, len(want))])
	}
}

// stoppedTop is a partition whose worker has stopped here (a hand-over): it answers
// unavailable.
type stoppedTop struct{ topPart }

func (stoppedTop) Top(context.Context, uint8, uint32, uint32, int) ([]window.Ranked, error) {
	return nil, fmt.Errorf("%w: stopped here", pipeline.ErrUnavailable)
}

// TestTopDuringHandOver: a top reaching a process whose partition has just stopped there
// (a hand-over: its worker answers unavailable, as its next owner already serves it)
// asks the partition's next owner, and is exact. Before, such a top failed unavailable.
func TestTopDuringHandOver(t *testing.T) {
	s := natstest.Start(t)
	startTops(t, s, []query.Partition{topPart{0}, topPart{1}, topPart{2}, stoppedTop{topPart{3}}}, 2*time.Second, nil)
	startTops(t, s, []query.Partition{nil, nil, nil, topPart{3}}, 2*time.Second, nil)
	nc := natstest.Connect(t, s)
	for range 8 { // each server takes some of the requests
		exactTop(t, nc, 50)
	}
}
