package event

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/store/delivery"
	"github.com/tally-dev/tally/store/stagelog"
)

// hopEntriesByMarshal is how hop batches were cut before their events were encoded
// once: the whole batch marshalled again at each halving.
func hopEntriesByMarshal(t *testing.T, s *Stage, st *stagelog.State, q int, evs []pipeline.Event) []delivery.OutboxEntry {
	var outbox []delivery.OutboxEntry
	p := s.cfg.Partition
	for len(evs) > 0 {
		k := min(len(evs), maxHopEvents)
		for {
			b := pipeline.HopBatch{Source: uint32(p), Seq: st.HopSeqs[uint32(q)] + 1, Events: evs[:k]}
			data, err := pipeline.Marshal(&b, false)
			if err != nil {
				t.Fatal(err)
			}
			if len(data) > s.cfg.MaxPayload/2 && k > 1 {
				k /= 2
				continue
			}
			st.HopSeqs[uint32(q)] = b.Seq
			outbox = append(outbox, delivery.OutboxEntry{Subject: s.cfg.Subjects.Event(pipeline.TypeHop, s.keys[q]), MsgID: pipeline.HopMsgID(p, q, b.Seq), Data: data})
			break
		}
		evs = evs[k:]
	}
	return outbox
}

// forwarded is evs as a transaction forwards them to one partition.
func forwarded(evs []pipeline.Event) *hopOut {
	var o hopOut
	for i := range evs {
		o.add(&evs[i])
	}
	return &o
}

func hopTestEvents(n int) []pipeline.Event {
	r := rand.New(rand.NewPCG(7, 8))
	evs := make([]pipeline.Event, n)
	for i := range evs {
		evs[i] = pipeline.Event{Type: pipeline.TypeLike, UID: pipeline.ID(r.Uint64()), Post: pipeline.ID(1 + r.IntN(1000)),
			Tx: strings.Repeat("t", r.IntN(100)), Seq: pipeline.SeqOf(uint64(7+i), 0)}
	}
	return evs
}

// Hop batches are cut from events encoded once, into the same messages, byte for byte,
// as when each halving marshalled the batch again: by count (maxHopEvents), by size
// (halved while over half of MaxPayload) and down to one event larger than that.
func TestHopEntriesCutAsBefore(t *testing.T) {
	all := hopTestEvents(5000)
	for _, c := range []struct{ maxPayload, events int }{{1 << 20, 5000}, {8 << 10, 5000}, {1000, 2000}, {100, 300}} {
		maxPayload, evs := c.maxPayload, all[:c.events]
		s := &Stage{cfg: Config{Partition: 2, Partitions: 4, Subjects: pipeline.NewSubjects(""), MaxPayload: maxPayload}, keys: partitionKeys(4)}
		st := stagelog.State{HopSeqs: map[uint32]uint64{1: 41}}
		want := hopEntriesByMarshal(t, s, &stagelog.State{HopSeqs: map[uint32]uint64{1: 41}}, 1, evs)
		got := s.hopEntries([]delivery.OutboxEntry{{MsgID: "before"}}, &st, 1, forwarded(evs))
		if got[0].MsgID != "before" || len(got)-1 != len(want) || st.HopSeqs[1] != 41+uint64(len(want)) {
			t.Fatalf("max payload %d: %d entries after what was there (%q), hop seq %d; want %d, %d", maxPayload, len(got)-1, got[0].MsgID, st.HopSeqs[1], len(want), 41+len(want))
		}
		for i, e := range got[1:] {
			if e.Subject != want[i].Subject || e.MsgID != want[i].MsgID || !bytes.Equal(e.Data, want[i].Data) {
				t.Fatalf("max payload %d: entry %d is %s %s %d bytes, want %s %s %d bytes", maxPayload, i, e.Subject, e.MsgID, len(e.Data), want[i].Subject, want[i].MsgID, len(want[i].Data))
			}
		}
		t.Logf("max payload %d: %d hop batches", maxPayload, len(want))
	}
}

// Cutting hop batches allocates about once a batch, however many times it halves: the
// events are not encoded again.
func TestHopEntriesEncodeOnce(t *testing.T) {
	out := forwarded(hopTestEvents(5000))
	s := &Stage{cfg: Config{Partition: 2, Partitions: 4, Subjects: pipeline.NewSubjects(""), MaxPayload: 8 << 10}, keys: partitionKeys(4)}
	var batches int
	allocs := testing.AllocsPerRun(10, func() {
		st := stagelog.State{HopSeqs: map[uint32]uint64{}}
		batches = len(s.hopEntries(make([]delivery.OutboxEntry, 0, 1000), &st, 1, out))
	})
	// A batch's payload and message id: 2 a batch (more
	// under -race, which moves some values to the heap); re-encoding made ~120.
	if allocs > float64(4*batches+50) {
		t.Fatalf("%d hop batches of %d events cut in %.0f allocations, want at most %d", batches, len(out.ends), allocs, 4*batches+50)
	}
}
