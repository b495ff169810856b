package event

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/store"
)

func TestCoalescer(t *testing.T) {
	c := newCoalescer(4)
	// Twice: the second round reuses what reset emptied.
	for round := range 2 {
		like := fieldRef{family: "post", field: 0}
		unread := fieldRef{family: "unread", field: 2}
		for range 3 {
			c.add(like, 42, pipeline.OpAdd, 1)
		}
		c.add(like, 42, pipeline.OpAdd, -1)
		c.add(like, 42, pipeline.OpAdd, -2)
		c.add(unread, 7, pipeline.OpAdd, 1)
		c.add(unread, 7, pipeline.OpSet, 0)
		c.add(unread, 7, pipeline.OpAdd, 1)
		got := map[string][]string{}
		for _, d := range c.order {
			for _, x := range c.byDest[d].deltas {
				got[d.family] = append(got[d.family], fmt.Sprint(x.Op, x.N))
			}
			if d.partition != pipeline.PartitionOf(pipeline.ID(c.byDest[d].deltas[0].ID), 4) {
				t.Fatalf("delta for %d routed to partition %d", c.byDest[d].deltas[0].ID, d.partition)
			}
		}
		// +1 +1 +1 is +3; -1 -2 is -3, kept after it (+3 -3 is not +0 on a counter at 1);
		// +1, set 0, +1 is set 1.
		if len(got) != 2 || !slices.Equal(got["post"], []string{"0 3", "0 -3"}) || !slices.Equal(got["unread"], []string{"1 1"}) {
			t.Fatalf("round %d: coalesced to %v", round, got)
		}
		c.reset()
		if len(c.order) != 0 {
			t.Fatal("reset left destinations")
		}
		for d, dd := range c.byDest {
			if len(dd.deltas) != 0 || dd.index.len() != 0 || dd.used {
				t.Fatalf("reset left deltas of %v: %v", d, dd.deltas)
			}
		}
	}
}

// applyDeltas applies deltas in order as a counter worker does: an add saturates at 0, a
// set below zero sets 0.
func applyDeltas(t store.Table, deltas []pipeline.Delta) {
	for _, d := range deltas {
		switch d.Op {
		case pipeline.OpAdd:
			t.Add(d.ID, int(d.Field), d.N)
		case pipeline.OpSet:
			t.Set(d.ID, int(d.Field), uint64(max(d.N, 0)))
		}
	}
}

// Item 7: a counter's value never depends on how its deltas were merged. For random
// sequences of adds of both signs and sets on a few counters, from random starting
// values, applying the coalesced batch equals applying every delta one by one.
func TestCoalescedEqualsOneByOne(t *testing.T) {
	const fields = 2
	for seed := range uint64(2000) {
		r := rand.New(rand.NewPCG(seed, 7))
		c := newCoalescer(1)
		var one []pipeline.Delta
		for range 1 + r.IntN(20) {
			f := fieldRef{family: "post", field: uint8(r.IntN(fields))}
			id := uint64(1 + r.IntN(3))
			op, n := pipeline.OpAdd, int64(r.IntN(13)-6)
			if r.IntN(6) == 0 {
				op, n = pipeline.OpSet, int64(r.IntN(8)-1)
			}
			c.add(f, pipeline.ID(id), op, n)
			one = append(one, pipeline.Delta{ID: id, Field: f.field, Op: op, N: n})
		}
		merged, single := store.NewMap(fields), store.NewMap(fields)
		start := map[uint64][]uint64{}
		for id := uint64(1); id <= 3; id++ {
			start[id] = []uint64{uint64(r.IntN(8)), uint64(r.IntN(8))}
			merged.Put(id, start[id])
			single.Put(id, start[id])
		}
		applyDeltas(single, one)
		var batch []pipeline.Delta
		for _, d := range c.order {
			batch = append(batch, c.byDest[d].deltas...)
		}
		applyDeltas(merged, batch)
		a, b := make([]uint64, fields), make([]uint64, fields)
		for id := uint64(1); id <= 3; id++ {
			merged.Get(id, a)
			single.Get(id, b)
			if !slices.Equal(a, b) {
				t.Fatalf("seed %d: id %d from %v: coalesced %v gives %v, one by one %v gives %v", seed, id, start[id], batch, a, one, b)
			}
		}
		if len(batch) > len(one) {
			t.Fatalf("seed %d: %d deltas coalesced into %d", seed, len(one), len(batch))
		}
	}
}

// The partitions a coalescer remembers are pipeline.PartitionOf's, for ids that share a
// slot of its memory, come back after others took their slot, and id 0.
func TestCoalescerPartitionOf(t *testing.T) {
	for _, n := range []int{1, 4, 16, 1000} {
		c := newCoalescer(n)
		r := rand.New(rand.NewPCG(uint64(n), 1))
		ids := []pipeline.ID{0, 1, 512, 1024, 1<<41 + 7, 1<<41 + 7 + 512}
		for range 5000 {
			ids = append(ids, pipeline.ID(r.Uint64N(1<<63)), ids[r.IntN(len(ids))], ids[r.IntN(len(ids))]+512)
		}
		for _, id := range ids {
			if got, want := c.partitionOf(id), pipeline.PartitionOf(id, n); got != want {
				t.Fatalf("%d partitions: id %d in partition %d, want %d", n, id, got, want)
			}
		}
	}
}
