package pipeline

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
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

// An EventDecoder whose batches grow an event at a time makes room for more than the
// largest so far: batches of about one size (a client's split by partition) made a
// large allocation in every few.
func TestEventDecoderRoomGrows(t *testing.T) {
	var d EventDecoder
	d.Families = DefaultFamilies()
	batches := make([][]byte, 100)
	for i := range batches {
		evs := make([]Event, 1000+i)
		for j := range evs {
			evs[j] = Event{Type: TypeView, Post: ID(1 + j)}
		}
		var err error
		if batches[i], err = Marshal(&Batch{Events: evs}, false); err != nil {
			t.Fatal(err)
		}
	}
	grown := 0
	for _, data := range batches {
		before := cap(d.room)
		if _, _, err := d.Decode(TypeBatch, data, nil); err != nil {
			t.Fatal(err)
		}
		if cap(d.room) != before {
			grown++
		}
	}
	if grown > 2 {
		t.Errorf("batches of 1 000 to 1 099 events grew the room %d times, want at most 2", grown)
	}
}

// An EventDecoder reading batch after batch into the same room decodes each as
// DecodeEvents does into a slice of its own: no field of an earlier batch's event
// shows through an event that leaves it out, after batches that failed halfway, were
// larger than the room kept or held bad events — in JSON and in MessagePack.
func TestEventDecoderReusesRoom(t *testing.T) {
	fams := Families(DefaultFamilies())
	r := rand.New(rand.NewPCG(3, 4))
	event := func() Event {
		e := Event{Type: TypeView, Post: ID(1 + r.IntN(1000))}
		switch r.IntN(4) {
		case 0:
			e = Event{Type: TypeLike, UID: ID(1 + r.IntN(100)), Post: e.Post}
		case 1:
			e.N, e.Tx, e.TS = int64(1+r.IntN(5)), "t"+strconv.Itoa(r.IntN(100)), int64(r.IntN(1e6))
		case 2:
			e = Event{Type: TypeFollow, UID: ID(1 + r.IntN(100)), Target: ID(1 + r.IntN(100))}
		}
		if r.IntN(20) == 0 {
			e.Type = "no such type" // a bad event
		}
		return e
	}
	var d EventDecoder
	d.Families = fams
	hops := 0 // hop batches decoded
	defer func() {
		if hops < 20 {
			t.Errorf("%d hop batches decoded: too few to tell", hops)
		}
	}()
	for round := range 300 {
		n := 1 + r.IntN(40)
		if r.IntN(20) == 0 {
			n = maxRoom + r.IntN(100) // past the room kept
		}
		evs := make([]Event, n)
		for i := range evs {
			evs[i] = event()
		}
		if round%3 == 2 { // a hop batch, into the same room
			if n > 2000 {
				evs = evs[:2000]
			}
			data, err := Marshal(&HopBatch{Source: 3, Seq: uint64(1 + round), Events: evs}, false)
			if err != nil {
				t.Fatal(err)
			}
			if r.IntN(10) == 0 {
				data = data[:len(data)*2/3]
			}
			want, wantErr := DecodeHopBatch(data, fams)
			got, err := d.DecodeHop(data)
			if (err == nil) != (wantErr == nil) || !reflect.DeepEqual(got, want) {
				t.Fatalf("round %d: hop batch %+v, %v; want %+v, %v", round, got, err, want, wantErr)
			}
			if err == nil {
				hops++
			}
			continue
		}
		asJSON := r.IntN(2) == 0
		data, err := Marshal(&Batch{Events: evs}, asJSON)
		if err != nil {
			t.Fatal(err)
		}
		if r.IntN(10) == 0 {
			data = data[:len(data)*2/3] // fails halfway, having read some events
		}
		want, wantBad, wantErr := DecodeEvents(TypeBatch, data, nil, fams)
		got, bad, err := d.Decode(TypeBatch, data, nil)
		switch {
		case (err == nil) != (wantErr == nil):
			t.Fatalf("round %d: error %v, want %v", round, err, wantErr)
		case !reflect.DeepEqual(got, want):
			t.Fatalf("round %d (JSON %v): decoded %+v,\nwant %+v", round, asJSON, got, want)
		case len(bad) != len(wantBad):
			t.Fatalf("round %d: %d bad events, want %d", round, len(bad), len(wantBad))
		}
		for i := range bad {
			if !reflect.DeepEqual(bad[i].Event, wantBad[i].Event) || bad[i].Index != wantBad[i].Index {
				t.Fatalf("round %d: bad event %d %+v, want %+v", round, i, bad[i], wantBad[i])
			}
		}
		if err == nil {
			sameAsFiltered(t, data, asJSON, fams, got, bad)
		}
	}
}

// sameAsFiltered fails unless good and bad are the events of batch data, decoded
// without validation, split by Validate: the valid ones in order, the others by index.
func sameAsFiltered(t *testing.T, data []byte, asJSON bool, fams Families, good []Event, bad []BadEvent) {
	t.Helper()
	var raw Batch
	if err := Unmarshal(data, asJSON, &raw); err != nil {
		t.Fatal(err)
	}
	var want []Event
	var wantBad []int
	for i, e := range raw.Events {
		if e.Validate(fams) != nil {
			wantBad = append(wantBad, i)
			continue
		}
		want = append(want, e)
	}
	gotBad := make([]int, len(bad))
	for i, b := range bad {
		gotBad[i] = b.Index
	}
	if len(good) != len(want) || (len(want) > 0 && !reflect.DeepEqual(good, want)) || !slices.Equal(gotBad, wantBad) {
		t.Fatalf("good %+v, bad at %v;\nwant %+v, bad at %v", good, gotBad, want, wantBad)
	}
}
