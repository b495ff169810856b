package systest

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/stages/node"
	"github.com/tally-dev/tally/stages/systest/rig"
)

// TestBadSnapshotFallsBack restarts with one snapshot corrupted, one truncated and one
// missing: those partitions load every stored counter instead, the others their
// snapshot, and every count is still exact.
func TestBadSnapshotFallsBack(t *testing.T) {
	dir := t.TempDir()
	mod := func(c *node.Config) { c.DataDir = dir }
	n, c := rig.StartNode(t, mod)
	ctx := context.Background()
	const posts = 3000
	base := uint64(1_700_000_000_000) << 22 // recent snowflake ids: hot
	var evs []pipeline.Event
	for i := range posts {
		for range 1 + i%3 {
			evs = append(evs, pipeline.Event{Type: "view", Post: pipeline.ID(base + uint64(i)<<12), N: 1})
		}
	}
	if err := c.PublishBatch(ctx, "views", evs); err != nil {
		t.Fatal(err)
	}
	rig.WaitCaughtUp(t, c)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	snap := func(p int) string { return filepath.Join(dir, "snapshots", "post-"+strconv.Itoa(p)+".snap") }
	b, err := os.ReadFile(snap(0))
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x40
	must(t, os.WriteFile(snap(0), b, 0o644))
	must(t, os.WriteFile(snap(1), b[:len(b)/3], 0o644))
	must(t, os.Remove(snap(2)))

	n, c = rig.StartNode(t, mod)
	rig.WaitCaughtUp(t, c) // every partition has loaded
	if got := n.CounterStats.Restored.Load(); got != 3*4-3 {
		files, _ := filepath.Glob(filepath.Join(dir, "snapshots", "*"))
		t.Fatalf("%d partitions restored from snapshots, want 9 (files %v)", got, files)
	}
	ids := make([]uint64, posts)
	for i := range ids {
		ids[i] = base + uint64(i)<<12
	}
	r, err := c.Get(ctx, "post", ids...)
	if err != nil {
		t.Fatal(err)
	}
	for i, cnt := range r.Counts {
		if cnt[3] != uint64(1+i%3) {
			t.Fatalf("post %d: %d views, want %d", i, cnt[3], 1+i%3)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
