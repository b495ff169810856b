package query_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/natstest"
)

// TestGetAtProcess: a get asked with pipeline.WhereHeader is answered with where each
// partition is served, each process's partitions under one token (once the process
// answering has learned the other's, from asking them); and the process of a token
// answers on <prefix>.get.<family>.at.<token> the ids of its own partitions, in
// MessagePack and JSON, those of any other partition unavailable without asking anyone
// (a partition it hands over too). A window, and a field it does not know, are bad
// requests there. Before, no get named where its partitions were, and no process
// answered a client for its own partitions alone.
func TestGetAtProcess(t *testing.T) {
	const n = 4
	s := natstest.Start(t)
	nc := natstest.Connect(t, s)
	a := startNode(t, s, nil, n, 10*time.Second, 0, 1)
	b := startNode(t, s, nil, n, 10*time.Second, 2, 3)
	ids := idsIn(n)

	var where pipeline.Where
	for i := 0; ; i++ {
		var r pipeline.GetReply
		m := ask(t, nc, "tally.get.post", nats.Header{pipeline.WhereHeader: []string{"1"}}, pipeline.GetRequest{IDs: ids}, &r)
		check(t, r, ids, n)
		w, err := pipeline.ParseWhere(m.Header.Get(pipeline.WhereHeader))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(w.At, "") {
			where = w
			break
		}
		if i == 100 {
			t.Fatalf("100 gets, and the partitions are still not all named: %q", m.Header.Get(pipeline.WhereHeader))
		}
	}
	if where.At[0] != where.At[1] || where.At[2] != where.At[3] || where.At[0] == where.At[2] {
		t.Fatalf("where %v: want partitions 0 and 1 in one process, 2 and 3 in another", where.At)
	}
	if m := ask(t, nc, "tally.get.post", nil, pipeline.GetRequest{IDs: ids}, &pipeline.GetReply{}); m.Header.Get(pipeline.WhereHeader) != "" {
		t.Errorf("a get not asking where was told %q", m.Header.Get(pipeline.WhereHeader))
	}

	atA, atB := "tally.get.post.at."+where.At[0], "tally.get.post.at."+where.At[2]
	others := func() int64 { return a.answered("part") + b.answered("part") + a.answered("peer") + b.answered("peer") }
	gets, asked := a.gets.Load()+b.gets.Load(), others()
	check(t, get(t, nc, atA, ids), ids, n, 2, 3)
	check(t, get(t, nc, atB, ids), ids, n, 0, 1)
	data, err := pipeline.Marshal(pipeline.GetRequest{IDs: ids}, true)
	if err != nil {
		t.Fatal(err)
	}
	m, err := nc.Request(atB, data, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var r pipeline.GetReply
	if err := pipeline.UnmarshalReply(m.Data, true, &r); err != nil {
		t.Fatalf("a JSON get at a process: %v: %s", err, m.Data)
	}
	check(t, r, ids, n, 0, 1)
	if a.gets.Load()+b.gets.Load() != gets || others() != asked {
		t.Errorf("gets at a process asked %d gets and %d partitions of another process: want none", a.gets.Load()+b.gets.Load()-gets, others()-asked)
	}

	b.setOwned(false, 3) // handed over: unavailable there, never asked elsewhere
	check(t, get(t, nc, atB, ids), ids, n, 0, 1, 3)

	ask(t, nc, atA, nil, pipeline.GetRequest{IDs: ids, Window: "1h"}, &r)
	if r.Code != pipeline.CodeBadRequest || !strings.Contains(r.Error, "window") {
		t.Errorf("a window at a process: %+v, want a bad request", r)
	}
	r = pipeline.GetReply{}
	ask(t, nc, atA, nil, map[string]any{"ids": ids, "added_later": 1}, &r)
	if r.Code != pipeline.CodeBadRequest || !strings.Contains(r.Error, "added_later") {
		t.Errorf("an unknown field at a process: %+v, want a bad request naming it", r)
	}
}
