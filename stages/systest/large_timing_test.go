package systest

import (
	"context"
	"math/rand"
	"strconv"
	"testing"
	"time"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/stages/node"
	"github.com/tally-dev/tally/stages/systest/rig"
)

// largePosts is how many posts benchTallyLarge's tables hold before it times anything:
// 250 000 a counter partition.
const largePosts = 4_000_000

// largeViews is posts snowflake ids made over the last hour, in random order, and n
// views of them drawn Zipf-skewed (s 1.1) after one view of each: the views and want,
// every post's views in all.
func largeViews(posts, n int) (first, views []pipeline.Event, want map[uint64][2]uint64) {
	r := rand.New(rand.NewSource(3))
	now := time.Now().UnixMilli() - node.SnowflakeEpoch
	ids := make([]uint64, posts)
	seen := make(map[uint64]bool, posts)
	for i := range ids {
		for {
			id := uint64(now-r.Int63n(3_600_000))<<22 | uint64(r.Int63n(1<<22))
			if !seen[id] {
				ids[i], seen[id] = id, true
				break
			}
		}
	}
	want = make(map[uint64][2]uint64, posts)
	first = make([]pipeline.Event, posts)
	for i, id := range ids {
		first[i] = pipeline.Event{Type: "view", Post: pipeline.ID(id), N: 1}
		want[id] = [2]uint64{0, 1}
	}
	rank := rand.NewZipf(r, 1.1, 1, uint64(posts-1))
	views = make([]pipeline.Event, n)
	for i := range views {
		id := ids[rank.Uint64()] // ids are in random order: a popular post is in any group
		views[i] = pipeline.Event{Type: "view", Post: pipeline.ID(id), N: 1}
		w := want[id]
		w[1]++
		want[id] = w
	}
	return first, views, want
}

// benchTallyLarge is views only into tables that already hold largePosts posts made over
// the last hour, as a running tallyd's do, where the benchmarks beside it start from
// empty tables and 100 000 posts in all: what a flush costs with the ids it did not
// change (a table's walk of its changed ids, its accounting) shows here. One view of
// each post is counted before the timer starts, and the process left to settle (see
// settle); its CPU an event counts what the views leave to compact, until it settles
// again, and its events/s ends as they are applied.
func benchTallyLarge(b *testing.B) {
	n, c := rig.StartNode(b, func(c *node.Config) { c.Partitions, c.FlushInterval = 16, 100*time.Millisecond })
	first, views, want := largeViews(largePosts, b.N)
	for i := 0; i < len(first); i += benchBatch * 16 { // transactions of their own, not publishBench's
		if err := c.PublishBatch(context.Background(), "first."+strconv.Itoa(i), first[i:min(i+benchBatch*16, len(first))]); err != nil {
			b.Fatal(err)
		}
	}
	rig.WaitCaughtUp(b, c)
	// Badger compacts the preload's writes for seconds after: not the views' cost.
	settle(b)
	flushed, heap, cpu := n.CounterStats.Flushed.Load(), heapNow(), cpuTime()
	b.ResetTimer()
	publishBench(b, c, views)
	rig.WaitCaughtUp(b, c)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	// What the views left to compact is their cost, done after they are applied.
	settle(b)
	reportCPU(b, cpu)
	heap.report(b, "event")
	b.ReportMetric(float64(n.CounterStats.Flushed.Load()-flushed)/float64(b.N), "writes/event")
	checkBench(b, c, want)
}

// settle waits until the process is idle — less than 5 % of a core over a quarter of a
// second, twice in a row: the checkpoints and Badger's compactions of what was applied
// are over — or a minute has passed.
func settle(b *testing.B) {
	const every = 250 * time.Millisecond
	start := time.Now()
	quiet, deadline := 0, start.Add(time.Minute)
	for quiet < 2 && time.Now().Before(deadline) {
		from := cpuTime()
		time.Sleep(every)
		if cpuTime()-from < every/20 {
			quiet++
		} else {
			quiet = 0
		}
	}
	if quiet < 2 {
		b.Logf("the process was still busy a minute after: figures include that work")
		return
	}
	b.Logf("settled in %v", time.Since(start).Round(100*time.Millisecond))
}
