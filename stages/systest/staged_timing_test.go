package systest

import (
	"context"
	"encoding/binary"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/store/cold"
)

// stagedTxn is how many events the staged consumer's first stage coalesces into one
// delta message: about what an event stage's transaction holds in EndToEnd/tally-views-only
// (3 200–5 100 events a transaction).
const stagedTxn = 4096

// stagedFlush is how often the staged consumer's second stage writes the counts changed:
// Tally's counter workers' default (--flush, node.DefaultConfig), where counts become
// durable and change events are sent. The contract consumer's floorFlush (a second) is
// kinder; the staged one keeps the design's cadence.
const stagedFlush = 100 * time.Millisecond

// benchConsumeStaged is the contract consumer (benchConsumeFloor with contract) cut in
// two as Tally's design cuts it, and nothing more: a first stage, the trivial consumer of
// the events stream, keeps the like records and liker chunks, coalesces each post's
// likes and views over stagedTxn events and publishes them as one message to a second
// stream, noting its position in Badger; a second stage, an ordered consumer of that
// stream on its own goroutine, applies them to its hot table (a Go map) and flushes each
// changed post's counts and window record every stagedFlush. No rules, no partitions (one
// delta message a transaction, where Tally sends one to each counter partition), no
// log, no checkpoints beyond those writes: a ceiling for any Tally of the design's shape —
// stateful stages, coalesced increments through a durable hop, counter workers — on
// Badger, beside the consumer in the same run.
func benchConsumeStaged(b *testing.B, likes int) {
	evs, _ := benchMix(b.N, likes)
	want := map[uint64][2]uint64{}
	for i := range evs {
		countRaw(want, &evs[i])
	}
	db, err := cold.Open(cold.Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	s := &stagedConsumer{b: b, first: floorConsumerOn(b, db, true, false), second: floorConsumerOn(b, db, false, true),
		deltas: map[uint64][2]uint64{}, signal: make(chan struct{}, 1)}
	defer func() {
		s.first.txn.Discard()
		s.second.txn.Discard()
		if err := db.Close(); err != nil {
			b.Error(err)
		}
	}()
	_, cpu := consumeAll(b, func(js jetstream.JetStream) {
		s.start(js)
		c, err := client.New(js.Conn(), client.WithPartitions(16))
		if err != nil {
			b.Fatal(err)
		}
		publishBench(b, c, evs)
	}, s.count)
	s.cc.Stop()
	if s.first.seen != b.N {
		b.Fatalf("the first stage saw %d events, want %d", s.first.seen, b.N)
	}
	for post, w := range want {
		if got := s.second.counts[post]; got != w {
			b.Fatalf("post %d: the second stage counted %v, want %v", post, got, w)
		}
	}
	s.first.checkStored()
	b.ReportMetric(float64(runtime.NumCPU())/cpu*1e6, "ceiling-events/s")
	b.ReportMetric(float64(s.first.puts+s.second.puts+s.marks)/float64(b.N), "badger-puts/event")
	b.ReportMetric(float64(s.sent)/float64(b.N), "delta-messages/event")
}

// stagedConsumer is benchConsumeStaged's two stages on one Badger.
type stagedConsumer struct {
	b             *testing.B
	js            jetstream.JetStream
	cc            jetstream.ConsumeContext
	first, second *floorConsumer // the first's like records and chunks, the second's counts

	deltas  map[uint64][2]uint64 // the first stage's coalesced likes and views of each post
	inTxn   int
	sent    uint64 // delta messages published
	marks   int    // the first stage's positions written
	buf     []byte
	applied atomic.Uint64 // delta messages the second stage applied
	signal  chan struct{} // a delta message applied
}

// start makes the second stream and starts the second stage on it.
func (s *stagedConsumer) start(js jetstream.JetStream) {
	ctx := context.Background()
	s.js = js
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "STAGED", Subjects: []string{"staged.>"}, Storage: jetstream.FileStorage}); err != nil {
		s.b.Fatal(err)
	}
	cons, err := js.OrderedConsumer(ctx, "STAGED", jetstream.OrderedConsumerConfig{})
	if err != nil {
		s.b.Fatal(err)
	}
	if s.cc, err = cons.Consume(s.apply); err != nil {
		s.b.Fatal(err)
	}
}

// count is the first stage: each event of the events stream, in order.
func (s *stagedConsumer) count(e *pipeline.Event) {
	s.first.count(e) // the like records and liker chunks, committed every 10 000 likes
	d := s.deltas[uint64(e.Post)]
	if e.Type == "like" {
		d[0]++
	} else {
		d[1] += uint64(e.N)
	}
	s.deltas[uint64(e.Post)] = d
	s.inTxn++
	last := s.first.seen == s.b.N
	if s.inTxn == stagedTxn || last {
		s.send()
	}
	if last { // the timer stops once the second stage has applied and flushed everything
		for s.applied.Load() < s.sent {
			<-s.signal
		}
		s.second.flush()
	}
}

// send publishes the coalesced deltas as one message and writes the stage's position.
func (s *stagedConsumer) send() {
	s.buf = s.buf[:0]
	for post, d := range s.deltas {
		s.buf = binary.AppendUvarint(binary.AppendUvarint(binary.AppendUvarint(s.buf, post), d[0]), d[1])
	}
	clear(s.deltas)
	s.sent++
	id := strconv.FormatUint(s.sent, 10)
	if _, err := s.js.PublishAsync("staged.d", s.buf, jetstream.WithMsgID(id)); err != nil {
		s.first.check(err)
	}
	s.first.check(s.first.db.Update(func(txn *cold.Txn) error {
		return txn.Set([]byte("staged-position"), binary.BigEndian.AppendUint64(nil, s.sent))
	}))
	s.marks++
	s.inTxn = 0
}

// apply is the second stage: each delta message, in order.
func (s *stagedConsumer) apply(m jetstream.Msg) {
	data := m.Data()
	for len(data) > 0 {
		var v [3]uint64
		for i := range v {
			x, n := binary.Uvarint(data)
			if n <= 0 {
				s.second.check(strconv.ErrSyntax)
			}
			v[i], data = x, data[n:]
		}
		s.second.add(v[0], [2]uint64{v[1], v[2]})
	}
	if time.Since(s.second.flushed) >= stagedFlush {
		s.second.flush()
	}
	s.applied.Add(1)
	select {
	case s.signal <- struct{}{}:
	default:
	}
}
