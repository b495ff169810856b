package pipeline

import (
	"encoding/json"
	"testing"
)

// benchLikes is a batch of n likes as the benchmarks send them: ids as numbers, each
// naming the post's owner, no tx (the message id deduplicates the batch).
func benchLikes(n int) []Event {
	evs := make([]Event, n)
	for i := range evs {
		evs[i] = Event{Type: TypeLike, UID: ID(1 + i), Post: ID(1<<41 + i*7), Owner: ID(99 + i%1000)}
	}
	return evs
}

// Decoding a batch costs a few allocations whatever its length, in JSON and in
// MessagePack: the events in one slice, kept in place (no copy of the good ones), and
// no allocation an event for a like without strings.
func TestDecodeEventsAllocs(t *testing.T) {
	fams := Families(DefaultFamilies())
	evs := benchLikes(1000)
	asJSON, err := json.Marshal(Batch{Events: evs})
	if err != nil {
		t.Fatal(err)
	}
	asMsgpack, _ := Marshal(&Batch{Events: evs}, false)
	hop, _ := Marshal(&HopBatch{Source: 1, Seq: 2, Events: evs}, false)
	for _, c := range []struct {
		name string
		data []byte
		max  float64
	}{{"json", asJSON, 2}, {"msgpack", asMsgpack, 2}} {
		allocs := testing.AllocsPerRun(20, func() {
			if good, bad, err := DecodeEvents(TypeBatch, c.data, nil, fams); err != nil || len(good) != len(evs) || len(bad) != 0 {
				t.Fatalf("%s: %d good, %d bad, %v", c.name, len(good), len(bad), err)
			}
		})
		if allocs > c.max {
			t.Errorf("%s: a batch of %d likes decodes in %.0f allocations, want at most %.0f", c.name, len(evs), allocs, c.max)
		}
	}
	allocs := testing.AllocsPerRun(20, func() {
		if b, err := DecodeHopBatch(hop, fams); err != nil || len(b.Events) != len(evs) {
			t.Fatalf("hop batch: %v", err)
		}
	})
	if allocs > 3 {
		t.Errorf("a hop batch of %d likes decodes in %.0f allocations, want at most 3", len(evs), allocs)
	}
}
