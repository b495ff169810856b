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
)

// fixedStandby is a standby of fixedPart's counts, 1.2 s behind.
type fixedStandby struct{ fixedPart }

func (fixedStandby) Stale(ctx context.Context, ids []uint64, out [][]uint64) (flow.Behind, error) {
	return flow.Behind{Msgs: 7, Age: 1200 * time.Millisecond}, fixedPart{}.Get(ctx, ids, out)
}

// TestGetStale: ids of a partition owned by no process but kept by a standby are printed
// with their counts, marked stale with how far behind; with --exact they are unavailable
// and the command fails, as before.
func TestGetStale(t *testing.T) {
	const n = 4
	s := natstest.Start(t)
	owners := map[string][]query.Partition{"post": {fixedPart{}, nil, nil, nil}}
	srv := query.New(query.Config{Subjects: pipeline.NewSubjects(""), Families: pipeline.DefaultFamilies(), Partitions: n, Timeout: 10 * time.Second, HandOver: 100 * time.Millisecond},
		natstest.Connect(t, s), nil, owners, slog.New(slog.NewTextHandler(io.Discard, nil)))
	for p := 1; p < n; p++ {
		srv.SetStandby("post", p, fixedStandby{})
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	var here, away uint64 // an id of partition 0, one of another
	for id := uint64(1); here == 0 || away == 0; id++ {
		if pipeline.PartitionOf(pipeline.ID(id), n) == 0 {
			here = max(here, id)
		} else {
			away = max(away, id)
		}
	}
	args := []string{"get", "post", "--server", s.ClientURL(), fmt.Sprint(here), fmt.Sprint(away)}
	code, out, errOut := tally(t, "", args...)
	wantLine := fmt.Sprintf("%d %d %d %d stale (1200 ms behind)", away*10, away*10+1, away*10+2, away*10+3)
	if code != 0 || !strings.Contains(strings.Join(strings.Fields(out), " "), wantLine) || strings.Count(out, "stale") != 1 {
		t.Errorf("exit %d\nout:\n%s\nerr: %s\nwant one line with %q", code, out, errOut, wantLine)
	}
	code, out, _ = tally(t, "", append([]string{"get", "--json"}, args[1:]...)...)
	wantJSON := fmt.Sprintf(`"stale":[{"ids":[%d],"at":[1],"behind_ms":1200,"behind_msgs":7}]`, away)
	if code != 0 || !strings.Contains(out, wantJSON) {
		t.Errorf("--json: exit %d, %q, want %s", code, out, wantJSON)
	}
	code, out, errOut = tally(t, "", append([]string{"get", "--exact"}, args[1:]...)...)
	if code != 1 || strings.Contains(out, "stale") || !strings.Contains(errOut, "1 ids unavailable") {
		t.Errorf("--exact: exit %d\nout:\n%s\nerr: %s\nwant %d unavailable", code, out, errOut, away)
	}
}
