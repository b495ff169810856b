package systest

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/store/cold"
)

// benchConsumeFloor is the trivial consumer (benchConsume, likes tenths of its events
// likes) doing beside it the least Badger work that any exactly-once consumer of the
// same events must do (floorConsumer): for each like, by a user never seen, its like
// record looked for and set — without it an unlike, or the like sent again, could not be
// told — in transactions of 10 000 likes. With contract, also the other entries Tally's
// contract has it keep, as many as it writes: each post's likers of a transaction in one
// chunk (the likers list), and every floorFlush each changed post's counts and its
// window record (durable counts, windowed counts). No rule is applied, no second stream is
// read: what it reports is a ceiling for any Tally whose cold tier is Badger, beside its
// consumer in the same run. ceiling-events/s is the most its CPU an event allows on
// every core of the machine (publishing, NATS and Badger included): more than it gets
// itself, since its consumer reads on one goroutine.
func benchConsumeFloor(b *testing.B, likes int, contract bool) {
	f := newFloorConsumer(b, contract)
	defer f.close()
	cpu := benchConsumeWith(b, func(n int) ([]pipeline.Event, map[uint64][2]uint64) { return benchMix(n, likes) }, f.count)
	if f.seen != b.N {
		b.Fatalf("the floor consumer saw %d events, want %d", f.seen, b.N)
	}
	f.checkStored()
	b.ReportMetric(float64(runtime.NumCPU())/cpu*1e6, "ceiling-events/s")
	b.ReportMetric(float64(f.puts)/float64(b.N), "badger-puts/event")
	b.ReportMetric(float64(f.chunks)/float64(b.N), "chunks/event")
}

// floorConsumer keeps, in a Badger of its own opened as store/cold's BenchmarkFloor
// opens it, a like record (40 bytes: the post, its place) for every liker of a stream's
// events and, with contract, liker chunks, counts and window records.
type floorConsumer struct {
	b            *testing.B
	db           *cold.DB
	txn          *cold.Txn
	inTxn        int
	seen         int
	puts, chunks int // entries set, liker chunks among them
	key, val     []byte
	// the keys and values set in the transaction and in a flush's: Badger keeps what it
	// is given until the commit, so each is a copy of its own
	held, flushHeld []byte

	contract    bool
	counting    bool // the counts and their flushes (contract, unless a second stage keeps them)
	txns        uint64
	first, last uint64               // the first liker and the last
	likers      map[uint64][]byte    // this transaction's likers of each post: user and post, 16 bytes each
	counts      map[uint64][2]uint64 // every post's likes and views: the hot table
	changed     map[uint64]bool      // the posts counted since the last flush
	flushed     time.Time
}

func newFloorConsumer(b *testing.B, contract bool) *floorConsumer {
	db, err := cold.Open(cold.Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	return floorConsumerOn(b, db, contract, contract)
}

// floorConsumerOn is a floor consumer on db, keeping the likers' chunks with contract,
// and the counts with counting.
func floorConsumerOn(b *testing.B, db *cold.DB, contract, counting bool) *floorConsumer {
	return &floorConsumer{b: b, db: db, txn: db.NewTxn(true), val: make([]byte, 64), contract: contract, counting: counting,
		likers: map[uint64][]byte{}, counts: map[uint64][2]uint64{}, changed: map[uint64]bool{}}
}

// count looks for the like record of e's user (when e is a like) and sets it, and
// commits every 10 000 likes and once b.N events are seen; with contract, it counts e
// and flushes the counts every floorFlush.
func (f *floorConsumer) count(e *pipeline.Event) {
	f.seen++
	post := uint64(e.Post)
	if e.Type == "like" {
		p := pipeline.PartitionOf(e.UID, 16)
		f.key = binary.BigEndian.AppendUint64(append(f.key[:0], 'L', byte(p>>8), byte(p), 'r'), uint64(e.UID))
		_, err := f.txn.Get(f.key, nil)
		f.check(err)
		binary.BigEndian.PutUint64(f.val, post)
		f.set(f.txn, &f.held, f.key, f.val[:40])
		if f.first == 0 {
			f.first = uint64(e.UID)
		}
		f.last = uint64(e.UID)
		if f.contract {
			f.likers[post] = binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(f.likers[post], uint64(e.UID)), post)
		}
		f.inTxn++
	}
	if f.counting {
		if e.Type == "like" {
			f.add(post, [2]uint64{1, 0})
		} else {
			f.add(post, [2]uint64{0, uint64(e.N)})
		}
	}
	last := f.seen == f.b.N
	if f.inTxn == 10_000 || last && f.inTxn > 0 {
		f.commit()
	}
	if f.counting && (last || f.seen%1024 == 0 && time.Since(f.flushed) >= floorFlush) {
		f.flush()
	}
}

// add counts likes and views d of post in the hot table.
func (f *floorConsumer) add(post uint64, d [2]uint64) {
	c := f.counts[post]
	c[0], c[1] = c[0]+d[0], c[1]+d[1]
	f.counts[post], f.changed[post] = c, true
}

// commit writes the transaction's liker chunks and commits it.
func (f *floorConsumer) commit() {
	f.txns++
	for post, chunk := range f.likers {
		f.key = binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(append(f.key[:0], 'K', 0, byte(post%16), 'l'), post), f.txns)
		f.set(f.txn, &f.held, f.key, chunk)
		f.chunks++
	}
	clear(f.likers)
	f.check(f.txn.Commit())
	f.txn, f.inTxn, f.held = f.db.NewTxn(true), 0, f.held[:0]
}

// flush writes each post counted since the last flush: its counts and its window record
// (64 bytes, about what a window record of a post counted in a few minutes takes), in
// transactions of up to 10 000 posts.
func (f *floorConsumer) flush() {
	txn, n := f.db.NewTxn(true), 0
	for post := range f.changed {
		if n++; n%10_000 == 0 {
			f.check(txn.Commit())
			txn, f.flushHeld = f.db.NewTxn(true), f.flushHeld[:0]
		}
		c := f.counts[post]
		v := binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(f.val[:0], c[0]), c[1])
		f.key = binary.BigEndian.AppendUint64(append(f.key[:0], 'c', 0, byte(post%16), 'p'), post)
		f.set(txn, &f.flushHeld, f.key, v)
		f.key[0] = 'w'
		f.set(txn, &f.flushHeld, f.key, f.val[:64])
	}
	clear(f.changed)
	f.check(txn.Commit())
	f.flushHeld = f.flushHeld[:0]
	f.flushed = time.Now()
}

// set sets copies of k and v, made in held, in txn.
func (f *floorConsumer) set(txn *cold.Txn, held *[]byte, k, v []byte) {
	f.check(txn.Set(hold(held, k), hold(held, v)))
	f.puts++
}

// hold appends b to held and returns the copy, which later appends leave as it is (one
// that outgrows held's array moves on to a new one).
func hold(held *[]byte, b []byte) []byte {
	n := len(*held)
	*held = append(*held, b...)
	return (*held)[n:len(*held):len(*held)]
}

// check stops the benchmark on err. It runs on the consumer's goroutine, where b.Fatal
// may not be called (and would leave the benchmark waiting for ever): it panics.
func (f *floorConsumer) check(err error) {
	if err != nil {
		panic(fmt.Sprintf("floor consumer: %v", err))
	}
}

// checkStored fails the benchmark unless the like records of the first liker and the
// last are stored (keys that shared a buffer would leave only the last of each
// transaction).
func (f *floorConsumer) checkStored() {
	if f.first == 0 {
		return
	}
	if err := f.db.View(func(txn *cold.Txn) error {
		for _, u := range []uint64{f.first, f.last} {
			p := pipeline.PartitionOf(pipeline.ID(u), 16)
			k := binary.BigEndian.AppendUint64([]byte{'L', byte(p >> 8), byte(p), 'r'}, u)
			if found, err := txn.Get(k, nil); err != nil || !found {
				f.b.Fatalf("the like record of user %d: found %v, %v", u, found, err)
			}
		}
		return nil
	}); err != nil {
		f.b.Fatal(err)
	}
}

func (f *floorConsumer) close() {
	f.txn.Discard()
	if err := f.db.Close(); err != nil {
		f.b.Error(err)
	}
}

// floorFlush is how often a contract floor consumer writes the counts changed. Tally
// flushes every 100 ms, but what it flushes was coalesced first over an event stage's
// transaction (several thousand events); a second keeps the floor's entries an event at
// or below Tally's in the same run (badger-puts/event beside each other).
const floorFlush = time.Second
