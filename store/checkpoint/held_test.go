package checkpoint_test

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"github.com/tally-dev/tally/store/checkpoint"
	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/cold/coldtest"
	"github.com/tally-dev/tally/store/delivery"
)

// The payloads of held delta batches live under the partition's checkpoint: written at
// once, written again harmlessly, deleted by the checkpoint that releases them, carried
// by the partition's backup and kept apart from other partitions, its counters and its
// change outbox.
func TestHeldPayloads(t *testing.T) {
	a, b := coldtest.Open(t, cold.Options{}), coldtest.Open(t, cold.Options{})
	put := func(db *cold.DB, p int, src uint32, seq uint64) {
		t.Helper()
		if err := checkpoint.PutHeld(db, "post", p, delivery.HeldRef{Src: src, Seq: seq}, []byte{byte(src), byte(seq)}); err != nil {
			t.Fatal(err)
		}
	}
	refs := func(db *cold.DB, p int) []delivery.HeldRef {
		t.Helper()
		r, err := checkpoint.HeldRefs(db, "post", p)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	put(a, 3, 1, 5)
	put(a, 3, 1, 5)
	put(a, 3, 2, 9)
	put(a, 3, 1, 7)
	put(a, 4, 1, 5)
	if got, want := refs(a, 3), []delivery.HeldRef{{Src: 1, Seq: 5}, {Src: 1, Seq: 7}, {Src: 2, Seq: 9}}; !slices.Equal(got, want) {
		t.Fatalf("held of partition 3: %v, want %v", got, want)
	}
	cp := &checkpoint.Checkpoint{Marks: map[uint32]*delivery.Mark{1: {Through: 5, Held: []delivery.Held{{Seq: 7, Size: 2}}}}}
	err := checkpoint.SaveCheckpoint(a, "post", 3, []checkpoint.Entry{{ID: 1, Counts: []uint64{1, 0, 0, 0}}}, cp, checkpoint.Journal{},
		checkpoint.Changes{Put: []delivery.OutboxEntry{{Seq: 1 << 16, Subject: "s", MsgID: "m"}}, Released: []delivery.HeldRef{{Src: 1, Seq: 5}}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := refs(a, 3), []delivery.HeldRef{{Src: 1, Seq: 7}, {Src: 2, Seq: 9}}; !slices.Equal(got, want) {
		t.Fatalf("held of partition 3 after the checkpoint: %v, want %v", got, want)
	}
	if ch, err := checkpoint.LoadChanges(a, "post", 3); err != nil || len(ch) != 1 {
		t.Fatalf("change outbox: %v, %v", ch, err)
	}

	var buf bytes.Buffer
	if err := a.Backup(&buf, cold.CounterKeys([]string{"post"}, 3)); err != nil {
		t.Fatal(err)
	}
	put(b, 3, 9, 9) // what the restore replaces
	if err := b.Restore(&buf, cold.CounterKeys([]string{"post"}, 3), t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if got, want := refs(b, 3), []delivery.HeldRef{{Src: 1, Seq: 7}, {Src: 2, Seq: 9}}; !slices.Equal(got, want) {
		t.Fatalf("held restored: %v, want %v", got, want)
	}
	if data, err := checkpoint.GetHeld(b, "post", 3, delivery.HeldRef{Src: 1, Seq: 7}); err != nil || !bytes.Equal(data, []byte{1, 7}) {
		t.Fatalf("payload restored: %v, %v", data, err)
	}
	if _, err := checkpoint.GetHeld(b, "post", 3, delivery.HeldRef{Src: 1, Seq: 5}); !errors.Is(err, cold.ErrCorrupt) {
		t.Fatalf("a released payload: %v, want ErrCorrupt", err)
	}
	if err := checkpoint.DeleteHeld(b, "post", 3, refs(b, 3)); err != nil {
		t.Fatal(err)
	}
	if got := refs(b, 3); len(got) != 0 {
		t.Fatalf("held after DeleteHeld: %v", got)
	}
	if got := refs(a, 4); len(got) != 1 {
		t.Fatalf("held of partition 4: %v", got)
	}
}
