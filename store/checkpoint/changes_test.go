package checkpoint_test

import (
	"bytes"
	"slices"
	"testing"

	"github.com/tally-dev/tally/store/checkpoint"
	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/cold/coldtest"
	"github.com/tally-dev/tally/store/delivery"
)

// A checkpoint writes its change events to the partition's outbox and deletes the
// published ones in the same transaction; the outbox moves with the partition's backup
// and stays out of its counters, its checkpoint and the other partitions.
func TestChangeOutbox(t *testing.T) {
	a, b := coldtest.Open(t, cold.Options{}), coldtest.Open(t, cold.Options{})
	seqs := func(db *cold.DB, p int) []uint64 {
		t.Helper()
		es, err := checkpoint.LoadChanges(db, "post", p)
		if err != nil {
			t.Fatal(err)
		}
		var s []uint64
		for _, e := range es {
			s = append(s, e.Seq)
		}
		return s
	}
	entry := func(seq uint64) delivery.OutboxEntry {
		return delivery.OutboxEntry{Seq: seq, Subject: "tally.chg.post.3", MsgID: "chg", Data: []byte{byte(seq)}}
	}
	cp := &checkpoint.Checkpoint{Marks: map[uint32]*delivery.Mark{}}
	save := func(db *cold.DB, p int, ch checkpoint.Changes) {
		t.Helper()
		if err := checkpoint.SaveCheckpoint(db, "post", p, []checkpoint.Entry{{ID: 1, Counts: []uint64{1, 0, 0, 0}}}, cp, checkpoint.Journal{}, ch); err != nil {
			t.Fatal(err)
		}
	}
	save(a, 3, checkpoint.Changes{Put: []delivery.OutboxEntry{entry(1<<16 + 1), entry(1 << 16)}})
	save(a, 3, checkpoint.Changes{Put: []delivery.OutboxEntry{entry(2 << 16)}, Published: []uint64{1 << 16}})
	save(a, 4, checkpoint.Changes{Put: []delivery.OutboxEntry{entry(7)}})
	if got, want := seqs(a, 3), []uint64{1<<16 + 1, 2 << 16}; !slices.Equal(got, want) {
		t.Fatalf("outbox of partition 3: %v, want %v", got, want)
	}
	es, _ := checkpoint.LoadChanges(a, "post", 3)
	if e := es[1]; e.Subject != "tally.chg.post.3" || e.MsgID != "chg" || !bytes.Equal(e.Data, []byte{0}) {
		t.Fatalf("entry read back as %+v", e)
	}
	n := 0
	if err := checkpoint.LoadCounters(a, "post", 3, 4, func(uint64, []uint64) { n++ }); err != nil || n != 1 {
		t.Fatalf("counters of partition 3: %d ids, %v", n, err)
	}
	if c, err := checkpoint.LoadCheckpoint(a, "post", 3); err != nil || c.Seq != 2 {
		t.Fatalf("checkpoint %+v, %v", c, err)
	}

	var buf bytes.Buffer
	if err := a.Backup(&buf, cold.CounterKeys([]string{"post"}, 3)); err != nil {
		t.Fatal(err)
	}
	if err := b.Restore(&buf, cold.CounterKeys([]string{"post"}, 3), t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if got, want := seqs(b, 3), []uint64{1<<16 + 1, 2 << 16}; !slices.Equal(got, want) {
		t.Fatalf("restored outbox: %v, want %v", got, want)
	}
	if got := seqs(b, 4); len(got) != 0 {
		t.Fatalf("partition 4's outbox came with partition 3's backup: %v", got)
	}
	if err := checkpoint.DeleteChanges(b, "post", 3, []uint64{1<<16 + 1, 2 << 16}); err != nil {
		t.Fatal(err)
	}
	if got := seqs(b, 3); len(got) != 0 {
		t.Fatalf("outbox after deleting everything: %v", got)
	}
}

// Marks of older versions kept the payloads of held batches (hop.In moves them out at
// load): a checkpoint holding many megabytes of them, with a full flush of counters,
// still commits and loads (the value goes to Badger's value log).
func TestCheckpointHoldsLargeHeld(t *testing.T) {
	db := coldtest.Open(t, cold.Options{})
	held := make([]delivery.Held, 1000)
	for i := range held {
		held[i] = delivery.Held{Seq: uint64(i + 2), Data: bytes.Repeat([]byte{byte(i)}, 10<<10)}
	}
	cp := &checkpoint.Checkpoint{Pos: 9, Marks: map[uint32]*delivery.Mark{4: {Through: 0, Held: held}}}
	entries := make([]checkpoint.Entry, 8192)
	for i := range entries {
		entries[i] = checkpoint.Entry{ID: uint64(i + 1), Counts: []uint64{1, 2, 3, 4}}
	}
	if err := checkpoint.SaveCounters(db, "post", 0, entries, cp, checkpoint.Journal{Append: true}); err != nil {
		t.Fatal(err)
	}
	back, err := checkpoint.LoadCheckpoint(db, "post", 0)
	if err != nil {
		t.Fatal(err)
	}
	m := back.Marks[4]
	if m == nil || len(m.Held) != len(held) || m.Held[999].Seq != 1001 || !bytes.Equal(m.Held[999].Data, held[999].Data) {
		t.Fatalf("held batches did not come back")
	}
}
