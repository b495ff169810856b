package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/natstest"
	"github.com/tally-dev/tally/stages/flow"
	"github.com/tally-dev/tally/stages/query"
	"github.com/tally-dev/tally/store/window"
)

// fixedPart stands in for a counter worker: field f of id counts id*10+f.
type fixedPart struct{}

func (fixedPart) Get(_ context.Context, ids []uint64, out [][]uint64) error {
	for i, id := range ids {
		for f := range out[i] {
			out[i][f] = id*10 + uint64(f)
		}
	}
	return nil
}
func (fixedPart) Ready() bool                                 { return true }
func (fixedPart) Behind(context.Context) (flow.Behind, error) { return flow.Behind{}, nil }

// TestGetUnavailable: ids of a partition owned by no process are printed as unavailable,
// never as numbers, and the command fails.
func TestGetUnavailable(t *testing.T) {
	const n = 4
	s := natstest.Start(t)
	// A query server owning partitions 0 and 1 of post; 2 and 3 are owned by nobody.
	owners := map[string][]query.Partition{"post": {fixedPart{}, fixedPart{}, nil, nil}}
	srv := query.New(query.Config{Subjects: pipeline.NewSubjects(""), Families: pipeline.DefaultFamilies(), Partitions: n, Timeout: 10 * time.Second},
		natstest.Connect(t, s), nil, owners, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	var here, away []string // ids of partitions 0-1 and of 2-3
	want := "id  like  repost  comment  view\n"
	for id := uint64(1); len(here) < 2 || len(away) < 2; id++ {
		if pipeline.PartitionOf(pipeline.ID(id), n) < 2 {
			if len(here) < 2 {
				here = append(here, fmt.Sprint(id))
			}
			continue
		}
		if len(away) < 2 {
			away = append(away, fmt.Sprint(id))
		}
	}
	args := []string{here[0], away[0], here[1], away[1]}
	pad := func(s string) string { return s + strings.Repeat(" ", 4-len(s)) }
	for _, id := range args {
		if id == here[0] || id == here[1] {
			var v uint64
			fmt.Sscan(id, &v)
			want += fmt.Sprintf("%s%-6d%-8d%-9d%d\n", pad(id), v*10, v*10+1, v*10+2, v*10+3)
		} else {
			want += pad(id) + "-     -       -        -  unavailable\n"
		}
	}
	start := time.Now()
	code, out, errOut := tally(t, "", append([]string{"get", "post", "--server", s.ClientURL()}, args...)...)
	wantErr := fmt.Sprintf("tally get: 2 ids unavailable (their partition is being handed over; try again): %s %s\n", away[0], away[1])
	if code != 1 || out != want || errOut != wantErr {
		t.Errorf("exit %d\nout:\n%s\nwant:\n%s\nerr: %q\nwant: %q", code, out, want, errOut, wantErr)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("took %v: no owner must be reported at once", took)
	}

	code, out, _ = tally(t, "", append([]string{"get", "--json", "post", "--server", s.ClientURL()}, args...)...)
	wantJSON := fmt.Sprintf(`"unavailable":[%s,%s]`, away[0], away[1])
	if code != 1 || !strings.Contains(out, wantJSON) || !strings.Contains(out, ",null,") {
		t.Errorf("--json: exit %d, %q, want %s and null counts", code, out, wantJSON)
	}
}

// TestGetEstimated: a count the reply names estimated is shown as ~n past the counts it
// gives exactly (a post's viewers past 128), as a number below.
func TestGetEstimated(t *testing.T) {
	s := natstest.Start(t)
	owners := map[string][]query.Partition{"post": {fixedPart{}}}
	fams := pipeline.WithViewers(pipeline.DefaultFamilies())
	srv := query.New(query.Config{Subjects: pipeline.NewSubjects(""), Families: fams, Partitions: 1, Timeout: 10 * time.Second},
		natstest.Connect(t, s), nil, owners, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	code, out, errOut := tally(t, "", "get", "post", "1", "20", "--server", s.ClientURL())
	want := "id  like  repost  comment  view  viewers\n1   10    11      12       13    14\n20  200   201     202      203   ~204\n"
	if code != 0 || out != want {
		t.Errorf("exit %d\nout:\n%s\nwant:\n%s\nerr: %s", code, out, want, errOut)
	}
}

// topFixed stands in for a counter worker with windows: id i of 1..30 changed by i%7.
type topFixed struct{ fixedPart }

func (topFixed) Top(_ context.Context, _ uint8, _, _ uint32, k int) ([]window.Ranked, error) {
	var all []window.Ranked
	for i := uint64(1); i <= 30; i++ {
		if i%7 > 0 {
			all = append(all, window.Ranked{ID: i, N: int64(i % 7)})
		}
	}
	return window.Merge(k, all), nil
}

// TestTop: tally top prints the ids best first with their change, ties by id, and a
// field the family lacks is the server's bad request.
func TestTop(t *testing.T) {
	s := natstest.Start(t)
	srv := query.New(query.Config{Subjects: pipeline.NewSubjects(""), Families: pipeline.DefaultFamilies(), Partitions: 1, Timeout: 10 * time.Second},
		natstest.Connect(t, s), nil, map[string][]query.Partition{"post": {topFixed{}}}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	code, out, errOut := tally(t, "", "top", "--limit", "3", "post", "like", "--server", s.ClientURL())
	want := "id  like over 1h\n6   +6\n13  +6\n20  +6\n"
	if code != 0 || out != want {
		t.Errorf("exit %d\nout:\n%s\nwant:\n%s\nerr: %s", code, out, want, errOut)
	}
	if code, _, errOut := tally(t, "", "top", "post", "nope", "--server", s.ClientURL()); code == 0 || !strings.Contains(errOut, "nope") {
		t.Errorf("top of a field post lacks: exit %d, %s", code, errOut)
	}
}
