package event

import (
	"testing"

	"github.com/tally-dev/tally/pipeline"
)

func TestCoalescer(t *testing.T) {
	c := newCoalescer(4)
	like := fieldRef{family: "post", field: 0}
	unread := fieldRef{family: "unread", field: 2}
	for range 3 {
		c.add(like, 42, pipeline.OpAdd, 1)
	}
	c.add(like, 42, pipeline.OpAdd, -1)
	c.add(unread, 7, pipeline.OpAdd, 1)
	c.add(unread, 7, pipeline.OpSet, 0)
	c.add(unread, 7, pipeline.OpAdd, 1)
	got := map[string]pipeline.Delta{}
	for _, d := range c.order {
		for _, x := range c.byDest[d].deltas {
			got[d.family] = x
		}
		if d.partition != pipeline.PartitionOf(pipeline.ID(c.byDest[d].deltas[0].ID), 4) {
			t.Fatalf("delta for %d routed to partition %d", c.byDest[d].deltas[0].ID, d.partition)
		}
	}
	if len(got) != 2 || got["post"].N != 2 || got["post"].Op != pipeline.OpAdd ||
		got["unread"].Op != pipeline.OpSet || got["unread"].N != 1 {
		t.Fatalf("coalesced to %+v", got)
	}
	c.reset()
	if len(c.order) != 0 || len(c.byDest) != 0 {
		t.Fatal("reset left deltas")
	}
}
