package event

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/buildinfo"
	"github.com/tally-dev/tally/pipeline/natstest"
	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/cold/coldtest"
	"github.com/tally-dev/tally/store/graph"
	"github.com/tally-dev/tally/store/stagelog"
)

// hop publishes hop batch seq of partition src to partition 0, carrying evs.
func (h *logHarness) hop(src int, seq uint64, evs []pipeline.Event) {
	h.t.Helper()
	data, err := pipeline.Marshal(&pipeline.HopBatch{Source: uint32(src), Seq: seq, Events: evs}, false)
	if err != nil {
		h.t.Fatal(err)
	}
	msg := &nats.Msg{Subject: h.sj.Event(pipeline.TypeHop, partitionKeys(h.parts)[0]), Data: data,
		Header: nats.Header{jetstream.MsgIDHeader: []string{pipeline.HopMsgID(src, 0, seq)}}}
	if _, err := h.js.PublishMsg(context.Background(), msg); err != nil {
		h.t.Fatal(err)
	}
}

// heldLikes is hop batch seq's likes: per users of their own, of post 1<<41+seq, placed
// where their batch was (pad, when set, makes each event that much larger).
func heldLikes(seq uint64, per int, pad string) []pipeline.Event {
	evs := make([]pipeline.Event, per)
	for i := range evs {
		evs[i] = pipeline.Event{Type: pipeline.TypeLike, UID: pipeline.ID(seq*uint64(per) + uint64(i) + 1),
			Post: pipeline.ID(1<<41 + seq), Seq: pipeline.SeqOf(1000+seq, i), TS: 1_700_000_000_000, Tx: pad}
	}
	return evs
}

// logRecords returns the size of every record in partition 0's log.
func (h *logHarness) logRecords() []int {
	h.t.Helper()
	ctx := context.Background()
	cons, err := h.js.OrderedConsumer(ctx, h.sj.LogStream(), jetstream.OrderedConsumerConfig{FilterSubjects: []string{h.sj.Log(0)}})
	if err != nil {
		h.t.Fatal(err)
	}
	var sizes []int
	for n := h.msgs(h.sj.LogStream()); uint64(len(sizes)) < n; {
		batch, err := cons.Fetch(int(min(100, n-uint64(len(sizes)))), jetstream.FetchMaxWait(time.Second))
		if err != nil {
			h.t.Fatal(err)
		}
		got := 0
		for m := range batch.Messages() {
			sizes = append(sizes, len(m.Data()))
			got++
		}
		if got == 0 {
			break
		}
	}
	return sizes
}

// releaseBacklog holds batches 2..n of source 1 above a gap at a logging stage with a
// standby following its log, then fills the gap, and checks that everything is applied
// exactly once, nothing dead-lettered, no gap given up, every log record small (no held
// payload in it), and the standby's state the owner's, byte for byte. It returns the
// owner.
func releaseBacklog(t *testing.T, h *logHarness, n uint64, per int, pad string, cut bool) *runningStage {
	a := h.start("a.1", nil)
	f := h.mirror()
	for seq := uint64(2); seq <= n; seq++ {
		h.hop(1, seq, heldLikes(seq, per, pad))
	}
	h.reached(a)
	if st := h.state(a.db); st.Hops[1] == nil || len(st.Hops[1].Held) != int(n-1) {
		t.Fatalf("held %+v, want %d batches above the gap", st.Hops[1], n-1)
	}
	txns := a.stats.Txns.Load()
	h.hop(1, 1, heldLikes(1, per, pad))
	natstest.Eventually(t, 2*time.Minute, "the backlog released", func() (bool, string) {
		st := h.state(a.db)
		m := st.Hops[1]
		return m != nil && m.Through == n && len(m.Held) == 0 && !a.busy.Load(), fmt.Sprintf("%+v", m)
	})
	if d, g := a.stats.Dead.Load(), a.stats.HopGaps.Load(); d != 0 || g != 0 {
		t.Fatalf("%d dead letters, %d gaps given up: the filler and its backlog must all apply", d, g)
	}
	if got := a.stats.Txns.Load() - txns; cut && got < 2 {
		t.Fatalf("the release took %d transaction(s): the test does not reach the bound", got)
	}
	rc, err := graph.CountRelations(a.db, []int{0}, []uint64{1<<41 + 1, 1<<41 + n/2, 1<<41 + n}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, got := range rc.Likes {
		if got != uint64(per) {
			t.Fatalf("post %d of the backlog has %d likers, want %d", i, got, per)
		}
	}
	if sum, want := sumDeltas(t, h.js, h.sj), int64(n)*int64(per); sum != want {
		t.Fatalf("deltas add up to %d likes, want %d", sum, want)
	}
	for _, size := range h.logRecords() {
		if size > 64<<10 {
			t.Fatalf("a log record of %d bytes: a held payload went into it", size)
		}
	}
	natstest.Eventually(t, 30*time.Second, "standby's state is the owner's", func() (bool, string) { return sameKeys(h, f.db, a.db) })
	t.Logf("released %d held batches (%d events) in %d transactions, %d cut short", n, int(n)*per, a.stats.Txns.Load()-txns, a.stats.Splits.Load())
	return a
}

// sameKeys reports whether two databases hold the same keys and values, but for the
// stage's state, whose maps encode in any order: it must decode the same.
func sameKeys(h *logHarness, a, b *cold.DB) (bool, string) {
	ka, kb := coldtest.All(h.t, a), coldtest.All(h.t, b)
	stage := string(h.stageKey())
	for k, v := range ka {
		if w, ok := kb[k]; k != stage && (!ok || !bytes.Equal(v, w)) {
			return false, fmt.Sprintf("key %x: %x / %x", k, v, w)
		}
	}
	if len(ka) != len(kb) {
		return false, fmt.Sprintf("%d keys, %d keys", len(ka), len(kb))
	}
	if sa, sb := h.state(a), h.state(b); !reflect.DeepEqual(sa, sb) {
		return false, fmt.Sprintf("states %+v / %+v", sa, sb)
	}
	return true, ""
}

// stageKey is partition 0's state key, found as the only key stagelog.Load reads that
// stagelog.Put writes.
func (h *logHarness) stageKey() []byte {
	db, err := cold.Open(cold.Options{Dir: h.t.TempDir()})
	if err != nil {
		h.t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(txn *cold.Txn) error { return stagelog.Put(txn, 0, &stagelog.State{}) }); err != nil {
		h.t.Fatal(err)
	}
	var k []byte
	err = db.View(func(txn *cold.Txn) error {
		return txn.Scan(nil, nil, false, func(key, _ []byte) (bool, error) {
			k = bytes.Clone(key)
			return false, nil
		})
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return k
}

// TestHeldReleaseFits: a gap that fills releases a backlog of 100 000 likes of distinct
// users held above it in transactions that fit (the database takes ~600 KB a
// transaction), where one transaction of the filler and everything behind it failed,
// the filler was dead-lettered and every later batch of its source was held for ever.
func TestHeldReleaseFits(t *testing.T) {
	n, per := uint64(50), 2000
	if testing.Short() || buildinfo.Race { // 40 000 likes: still far past one transaction
		n = 20
	}
	h := newHarness(t, 2)
	h.opts = cold.Options{MemTableSize: 4 << 20}
	releaseBacklog(t, h, n, per, "", true)
}

// TestHeldPayloadsStayOutOfTheLog: 50 MB held above a gap at a stage that logs its
// transactions (--backup-every): the log records stay small, where every record carried
// the held payloads and, past the payload limit, none could be appended.
func TestHeldPayloadsStayOutOfTheLog(t *testing.T) {
	n, per := uint64(125), 20
	if testing.Short() || buildinfo.Race { // 12 MB: still far past a record's payload limit
		n = 30
	}
	h := newHarness(t, 2)
	releaseBacklog(t, h, n, per, strings.Repeat("x", 20_000), false) // 400 KB a batch
}

// TestDeadLetteredHopFillsItsNumber: a hop batch that does not decode is dead-lettered
// and its number, read from its message id, is filled, so the batch after it is applied
// at once instead of being held until the gap is given up (and then the ones after it).
func TestDeadLetteredHopFillsItsNumber(t *testing.T) {
	h := newHarness(t, 2)
	a := h.start("a.1", nil)
	h.hop(1, 1, heldLikes(1, 3, ""))
	msg := &nats.Msg{Subject: h.sj.Event(pipeline.TypeHop, partitionKeys(h.parts)[0]), Data: []byte("not a hop batch"),
		Header: nats.Header{jetstream.MsgIDHeader: []string{pipeline.HopMsgID(1, 0, 2)}}}
	if _, err := h.js.PublishMsg(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	h.hop(1, 3, heldLikes(3, 3, ""))
	h.caughtUp(a)
	m := h.state(a.db).Hops[1]
	if m == nil || m.Through != 3 || len(m.Held) != 0 {
		t.Fatalf("marks of partition 1: %+v, want every batch through 3 applied", m)
	}
	if liked, err := graph.Related(a.db, 0, graph.Like, 3*3+1, []uint64{1<<41 + 3}); err != nil || !liked[0] {
		t.Fatalf("a like of batch 3: %v, %v", liked, err)
	}
	if got := a.stats.Dead.Load(); got != 1 {
		t.Fatalf("%d dead letters, want the undecodable batch", got)
	}
}

// TestHeldReleaseOnePost: a held backlog of likes of one post in one second, released
// over many transactions — some consuming no message, at the position of the one
// before — keeps every liker: each transaction's liker chunk has a key of its own.
func TestHeldReleaseOnePost(t *testing.T) {
	const n, per = 30, 1000
	h := newHarness(t, 2)
	h.opts = cold.Options{MemTableSize: 2 << 20}
	a := h.start("a.1", nil)
	for seq := uint64(2); seq <= n; seq++ {
		evs := heldLikes(seq, per, "")
		for i := range evs {
			evs[i].Post = 1 << 41
		}
		h.hop(1, seq, evs)
	}
	h.reached(a)
	evs := heldLikes(1, per, "")
	for i := range evs {
		evs[i].Post = 1 << 41
	}
	h.hop(1, 1, evs)
	natstest.Eventually(t, 2*time.Minute, "the backlog released", func() (bool, string) {
		m := h.state(a.db).Hops[1]
		return m != nil && m.Through == n && !a.busy.Load(), fmt.Sprintf("%+v", m)
	})
	rc, err := graph.CountRelations(a.db, []int{0}, []uint64{1 << 41}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rc.Likes[0] != n*per {
		t.Fatalf("post has %d likers, want %d (%d transactions, %d cut short)", rc.Likes[0], n*per, a.stats.Txns.Load(), a.stats.Splits.Load())
	}
}

// TestHopsHeldCountsWhatIsHeld: a stage that starts with hop batches held above a gap,
// releases them and stops leaves HopsHeld at 0, where the stop took away what was held
// at its start a second time, and the gauge of a process whose partitions moved read
// below 0.
func TestHopsHeldCountsWhatIsHeld(t *testing.T) {
	h := newHarness(t, 2)
	a := h.start("a.1", nil)
	h.hop(1, 2, heldLikes(2, 3, ""))
	h.hop(1, 3, heldLikes(3, 3, ""))
	h.reached(a)
	if got := a.stats.HopsHeld.Load(); got != 2 {
		t.Fatalf("HopsHeld %d while 2 batches are held", got)
	}
	if lag, err := a.Lag(context.Background()); err != nil || lag != 2 {
		t.Fatalf("Lag %d (%v) at the end of the stream with 2 batches held, want 2: held batches are not applied", lag, err)
	}
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	if got := a.stats.HopsHeld.Load(); got != 0 {
		t.Fatalf("HopsHeld %d after the stage stopped, want 0", got)
	}
	b := h.start("a.2", a.db)
	h.reached(b)
	if got := b.stats.HopsHeld.Load(); got != 2 {
		t.Fatalf("HopsHeld %d at a start with 2 batches held", got)
	}
	h.hop(1, 1, heldLikes(1, 3, ""))
	natstest.Eventually(t, 10*time.Second, "the held batches released", func() (bool, string) {
		m := h.state(b.db).Hops[1]
		return m != nil && m.Through == 3 && len(m.Held) == 0, fmt.Sprintf("%+v", m)
	})
	if err := b.stop(); err != nil {
		t.Fatal(err)
	}
	if got := b.stats.HopsHeld.Load(); got != 0 {
		t.Fatalf("HopsHeld %d after the stage released what it held and stopped, want 0", got)
	}
}
