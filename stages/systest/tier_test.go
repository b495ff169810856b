package systest

import (
	"context"
	"testing"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/stages/node"
	"github.com/tally-dev/tally/stages/systest/rig"
)

// TestHotMaxMem counts views of 60 000 recent posts spread over three hours (about forty
// groups of ids) with and without a 256 KiB bound on the hot tier: with it, the tables
// stay within the bound once checkpointed (the least recently used groups move to
// Badger), and every count read back — now mostly from the cold tier — is exact. A get
// of ids in the cold tier is answered by the partition's worker, never by its asker
// reading the table (counter.Stats.Peeked; without the bound, gets are).
func TestHotMaxMem(t *testing.T) {
	const posts, bound = 60_000, 256 << 10
	base := uint64(1_790_000_000_000) // 2026: younger than the cold age
	ids := make([]uint64, posts)
	for i := range ids {
		ms := base + uint64(i)*3*3600*1000/posts
		ids[i] = ms<<22 | uint64(i%4096)
	}
	run := func(max int64) *node.Node {
		n, c := rig.StartNode(t, func(c *node.Config) { c.HotMaxMem = max })
		ctx := context.Background()
		evs := make([]pipeline.Event, 0, 5000)
		for i, id := range ids {
			evs = append(evs, pipeline.Event{Type: "view", Post: pipeline.ID(id), N: int64(1 + i%7)})
			if len(evs) == cap(evs) {
				if err := c.PublishBatch(ctx, "v"+string(rune('a'+i/5000)), evs); err != nil {
					t.Fatal(err)
				}
				evs = evs[:0]
			}
		}
		rig.WaitCaughtUp(t, c)
		for lo := 0; lo < posts; lo += 1000 {
			r, err := c.Get(ctx, "post", ids[lo:lo+1000]...)
			if err != nil {
				t.Fatal(err)
			}
			for i, cnt := range r.Counts {
				if want := uint64(1 + (lo+i)%7); cnt[3] != want {
					t.Fatalf("post %d: %d views, want %d", lo+i, cnt[3], want)
				}
			}
		}
		return n
	}
	free := run(0)
	t.Logf("unbounded: %d B in RAM (%.1f B/id)", free.HotBytes(), float64(free.HotBytes())/posts)
	if free.CounterStats.Peeked.Load() == 0 { // every id in RAM, the partitions idle
		t.Fatal("unbounded: no partition's get was read by its asker")
	}
	bounded := run(bound)
	st := &bounded.CounterStats
	t.Logf("bounded to %d B: %d B in RAM, %d groups (%d ids) evicted, %d cold reads, %d cache hits", bound, bounded.HotBytes(),
		st.Evicted.Load(), st.EvictedIDs.Load(), st.ColdReads.Load(), st.ColdHits.Load())
	if free.HotBytes() < 2*bound {
		t.Fatalf("the unbounded tables hold only %d B: the bound would not bite", free.HotBytes())
	}
	if got := bounded.HotBytes(); got > bound || st.Evicted.Load() == 0 || st.ColdReads.Load() == 0 {
		t.Fatalf("bounded: %d B in RAM (bound %d), %d groups evicted, %d cold reads", got, bound, st.Evicted.Load(), st.ColdReads.Load())
	}
}
