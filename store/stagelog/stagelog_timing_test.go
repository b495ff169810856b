package stagelog

import (
	"bytes"
	"strconv"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tally-dev/tally/store/delivery"
)

// timingRecord is a log record as an event stage of the likes mix writes one with its
// writes (LogWrites): delta batches to 16 counter partitions and ~50 kB of writes.
func timingRecord() *Record {
	r := &Record{Prev: 41, State: State{Pos: 1 << 20, Seqs: map[string]uint64{}, Outbox: 900}, Writes: bytes.Repeat([]byte{7}, 50<<10)}
	for p := range 16 {
		r.State.Seqs["post."+strconv.Itoa(p)] = uint64(p) * 1000
		r.Outbox = append(r.Outbox, delivery.OutboxEntry{Seq: uint64(885 + p), Subject: "tally.delta.post." + strconv.Itoa(p),
			MsgID: "d.post." + strconv.Itoa(p) + ".3.123456", Data: bytes.Repeat([]byte{1}, 1500)})
	}
	return r
}

// TestEncodeRecordAsMarshal: a record encodes as msgpack.Marshal writes it (compared
// with one destination: a map's order is Go's), in room enough, and decodes back.
func TestEncodeRecordAsMarshal(t *testing.T) {
	r := timingRecord()
	r.State.Seqs = map[string]uint64{"post.3": 3000}
	got, err := EncodeRecord(r)
	if err != nil {
		t.Fatal(err)
	}
	want, err := msgpack.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("EncodeRecord wrote %d bytes unlike msgpack.Marshal's %d", len(got), len(want))
	}
	if len(got) > r.size() {
		t.Fatalf("encoded in %d bytes, size says %d: the buffer grew", len(got), r.size())
	}
	back, err := DecodeRecord(got)
	if err != nil || len(back.Outbox) != 16 || !bytes.Equal(back.Writes, r.Writes) {
		t.Fatalf("decoded %d outbox entries, writes equal %v, err %v", len(back.Outbox), bytes.Equal(back.Writes, r.Writes), err)
	}
}

// BenchmarkEncodeRecord is a log record encoded into room for it (EncodeRecord) and by
// msgpack.Marshal, whose buffer doubles as it fills.
// Run: go test ./store/stagelog -run XXX -bench EncodeRecord -benchmem
func BenchmarkEncodeRecord(b *testing.B) {
	r := timingRecord()
	b.Run("sized", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, err := EncodeRecord(r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("msgpack.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, err := msgpack.Marshal(r); err != nil {
				b.Fatal(err)
			}
		}
	})
}
