package systest

import (
	"context"
	"fmt"
	"maps"
	"math/rand"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/natstest"
	"github.com/tally-dev/tally/stages/node"
	"github.com/tally-dev/tally/stages/systest/rig"
	"github.com/tally-dev/tally/store/cold"
)

// benchEvents makes n events over a Zipf-skewed set of posts: 70% likes (each a new
// relation), 30% views. It returns the expected like and view count of every post.
func benchEvents(n int) ([]pipeline.Event, map[uint64][2]uint64) { return benchMix(n, 7) }

// benchMix is benchEvents with likes tenths of likes.
func benchMix(n, likes int) ([]pipeline.Event, map[uint64][2]uint64) { return benchLikers(n, likes, 0) }

// benchLikers is benchMix with likers drawn from users (1..users, Zipf) instead of a new
// user for every like (users 0, benchMix): as real traffic, a liker likes again, and its
// like record is read once and held. A like of a post the user liked already counts
// nothing.
func benchLikers(n, likes, users int) ([]pipeline.Event, map[uint64][2]uint64) {
	r := rand.New(rand.NewSource(1))
	posts := rand.NewZipf(r, 1.1, 1, 99_999)
	var uids *rand.Zipf
	if users > 0 {
		uids = rand.NewZipf(r, 1.1, 1, uint64(users-1))
	}
	evs := make([]pipeline.Event, n)
	want := map[uint64][2]uint64{}
	type pair struct{ uid, post uint64 }
	liked := map[pair]bool{}
	for i := range evs {
		post := 1<<41 + posts.Uint64()
		w := want[post]
		if r.Intn(10) < likes {
			uid := uint64(1 + i)
			if uids != nil {
				uid = 1 + uids.Uint64()
			}
			evs[i] = pipeline.Event{Type: "like", UID: pipeline.ID(uid), Post: pipeline.ID(post)}
			again := false
			if uids != nil {
				p := pair{uid, post}
				again, liked[p] = liked[p], true
			}
			if !again {
				w[0]++
			}
		} else {
			evs[i] = pipeline.Event{Type: "view", Post: pipeline.ID(post), N: 1}
			w[1]++
		}
		want[post] = w
	}
	return evs, want
}

const benchBatch = 1000

// BenchmarkEndToEnd is events applied per second through the whole path (durable file
// storage, exactly once), beside raw JetStream publishing of the same batch messages.
// Run: go test ./stages/systest -run XXX -bench EndToEnd -benchtime 200000x
func BenchmarkEndToEnd(b *testing.B) {
	b.Run("jetstream-publish", func(b *testing.B) {
		s := natstest.Start(b)
		nc := natstest.Connect(b, s)
		js, _ := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(8192))
		ctx := context.Background()
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "RAW", Subjects: []string{"raw.>"}, Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute}); err != nil {
			b.Fatal(err)
		}
		evs, _ := benchEvents(b.N)
		b.ResetTimer()
		var futures []jetstream.PubAckFuture
		for i := 0; i < len(evs); i += benchBatch {
			data, _ := pipeline.Marshal(&pipeline.Batch{Events: evs[i:min(i+benchBatch, len(evs))]}, false)
			f, err := js.PublishAsync("raw."+strconv.Itoa(i%16), data, jetstream.WithMsgID(strconv.Itoa(i)))
			if err != nil {
				b.Fatal(err)
			}
			futures = append(futures, f)
		}
		for _, f := range futures {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	})
	b.Run("jetstream-consume", func(b *testing.B) { benchConsume(b, 7) })
	// The same consumer with the least Badger work an exactly-once consumer must add, and
	// with the entries Tally's contract keeps (floorConsumer): ceilings of any Tally on
	// Badger, beside the consumer.
	b.Run("jetstream-consume-floor", func(b *testing.B) { benchConsumeFloor(b, 7, false) })
	b.Run("jetstream-consume-floor-likes-only", func(b *testing.B) { benchConsumeFloor(b, 10, false) })
	b.Run("jetstream-consume-contract", func(b *testing.B) { benchConsumeFloor(b, 7, true) })
	b.Run("jetstream-consume-contract-likes-only", func(b *testing.B) { benchConsumeFloor(b, 10, true) })
	b.Run("jetstream-consume-contract-views-only", func(b *testing.B) { benchConsumeFloor(b, 0, true) })
	// The contract consumer cut in two stages through a second stream, as the design
	// cuts Tally (benchConsumeStaged): the ceiling of the design's shape on Badger.
	b.Run("jetstream-consume-staged", func(b *testing.B) { benchConsumeStaged(b, 7) })
	b.Run("jetstream-consume-staged-likes-only", func(b *testing.B) { benchConsumeStaged(b, 10) })
	b.Run("jetstream-consume-staged-views-only", func(b *testing.B) { benchConsumeStaged(b, 0) })
	b.Run("tally", func(b *testing.B) { benchTally(b, 7, nil) })
	// The same without the windowed counts (--windows=false): what they cost.
	b.Run("tally-nowindows", func(b *testing.B) { benchTally(b, 7, func(c *node.Config) { c.Windows = false }) })
	b.Run("tally-views-only", func(b *testing.B) { benchTally(b, 0, nil) })
	b.Run("tally-likes-only", func(b *testing.B) { benchTally(b, 10, nil) })
	// Views only into tables of 4 M posts made over the last hour (large_timing_test.go).
	b.Run("tally-views-large", benchTallyLarge)
	// The mix with likers who like again (benchLikers): above, every like is a new
	// user's, whose like record is looked up in Badger and not found.
	likers := func(n int) ([]pipeline.Event, map[uint64][2]uint64) { return benchLikers(n, 7, 1_000_000) }
	b.Run("jetstream-consume-likers", func(b *testing.B) { benchConsumeMix(b, likers) })
	b.Run("tally-likers", func(b *testing.B) { benchTallyMix(b, likers, nil) })
	// One and three tallyd processes on the same three-server cluster: streams R3, state
	// backed up, every event-stage transaction logged (benchProcs, cluster_timing_test.go).
	tallyd := rig.Tallyd
	b.Run("tally-cluster-r3-1", func(b *testing.B) { benchProcs(b, tallyd, 1) })
	b.Run("tally-cluster-r3-3", func(b *testing.B) { benchProcs(b, tallyd, 3) })
	// The same three without warm standbys: what keeping them costs.
	b.Run("tally-cluster-r3-3-nostandby", func(b *testing.B) { benchProcs(b, tallyd, 3, "--standbys=false") })
	// The same single tallyd without backups: no event-stage log, the log's cost.
	b.Run("tally-cluster-r3-1-nolog", func(b *testing.B) {
		cl := natstest.StartCluster(b, 3)
		benchTally(b, 7, func(c *node.Config) { c.NATSURL = cl.URLs() })
	})
}

// benchConsume is the physical limit of a consumer here: the same batches published the
// same way into the same stream, read by the trivial consumer (consumeAll) — the
// baseline the tally sub-benchmarks are a ratio of.
func benchConsume(b *testing.B, likes int) {
	benchConsumeMix(b, func(n int) ([]pipeline.Event, map[uint64][2]uint64) { return benchMix(n, likes) })
}

// benchConsumeMix is benchConsume of the events mix makes. It counts every like, a user's
// second like of a post too (it keeps no relation): its counts are checked against the
// events, not against mix's counts.
func benchConsumeMix(b *testing.B, mix func(n int) ([]pipeline.Event, map[uint64][2]uint64)) {
	benchConsumeWith(b, mix, nil)
}

// benchConsumeWith is benchConsumeMix with also (unless nil) called on every event the
// consumer counts, in its goroutine. It returns the CPU the run took an event, in µs.
func benchConsumeWith(b *testing.B, mix func(n int) ([]pipeline.Event, map[uint64][2]uint64), also func(*pipeline.Event)) float64 {
	evs, _ := mix(b.N)
	want := map[uint64][2]uint64{}
	for i := range evs {
		countRaw(want, &evs[i])
	}
	got := make(map[uint64][2]uint64, len(want))
	published, cpu := consumeAll(b, func(js jetstream.JetStream) {
		c, err := client.New(js.Conn(), client.WithPartitions(16))
		if err != nil {
			b.Fatal(err)
		}
		publishBench(b, c, evs)
	}, func(e *pipeline.Event) {
		countRaw(got, e)
		if also != nil {
			also(e)
		}
	})
	b.ReportMetric(float64(b.N)/published.Seconds(), "published/s")
	for id, w := range want {
		if got[id] != w {
			b.Fatalf("post %d: counted %v, want %v", id, got[id], w)
		}
	}
	return cpu
}

// countRaw counts e in counts, as the trivial consumer does: every like and view of a post.
func countRaw(counts map[uint64][2]uint64, e *pipeline.Event) {
	w := counts[uint64(e.Post)]
	if e.Type == "like" {
		w[0]++
	} else {
		w[1] += uint64(e.N)
	}
	counts[uint64(e.Post)] = w
}

// consumeAll is the trivial consumer: Tally's streams on a server with no tallyd, into
// which publish publishes b.N events, read by one ordered consumer that decodes them
// with the project's codec and hands each to count — no durability, no exactly-once. It
// times publishing and consuming, reports events/s, CPU and allocations an event, and
// returns how long publishing took and the CPU an event (µs).
func consumeAll(b *testing.B, publish func(jetstream.JetStream), count func(*pipeline.Event)) (time.Duration, float64) {
	return consumeBy(b, 0, publish, count)
}

// streamAPartition, as consumeBy's readers, stores each of the 16 partitions in an
// events stream of its own, under the prefix partitionPrefix names, each read by one
// consumer without a filter: the layout that would spare NATS the filtered walks.
const streamAPartition = -1

// partitionPrefix is the prefix of partition p's streams under streamAPartition: a
// publisher publishes p's events there.
func partitionPrefix(p int) string { return "t" + strconv.Itoa(p) }

// consumeBy is consumeAll read by one ordered consumer of the whole stream (readers
// 0), or by readers consumers filtered on the 16 partitions' stored subjects, each
// given an equal share of them (16: one a partition, as Tally's event stages read it;
// 3: one a process, were three tallyd to read their partitions with one consumer
// each), or by one for each partition's stream (streamAPartition), their deliveries
// counted one at a time.
func consumeBy(b *testing.B, readers int, publish func(jetstream.JetStream), count func(*pipeline.Event)) (time.Duration, float64) {
	s := natstest.Start(b)
	nc := natstest.Connect(b, s)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(8192))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	sc := pipeline.DefaultStreamConfig()
	sc.Partitions = 16
	// The streams set up, and what each consumer reads: a stream, and the subjects it
	// is filtered on.
	type read struct {
		subj   pipeline.Subjects
		filter []string
	}
	setups, reads := []pipeline.StreamConfig{sc}, []read{{sc.Subjects, nil}}
	switch {
	case readers == streamAPartition:
		setups, reads = nil, nil
		for p := range sc.Partitions {
			pc := sc
			pc.Subjects = pipeline.NewSubjects(partitionPrefix(p))
			setups, reads = append(setups, pc), append(reads, read{pc.Subjects, nil})
		}
	case readers > 0:
		reads = make([]read, readers)
		for p := range sc.Partitions {
			r := &reads[p%readers]
			r.subj, r.filter = sc.Subjects, append(r.filter, sc.Subjects.EventsStored(p))
		}
	}
	for _, c := range setups {
		if err := pipeline.Setup(ctx, js, c); err != nil {
			b.Fatal(err)
		}
	}
	var mu sync.Mutex
	counted := 0
	done := make(chan struct{})
	fams := pipeline.Families(pipeline.DefaultFamilies())
	heap, cpu := heapNow(), cpuTime()
	b.ResetTimer()
	for _, r := range reads {
		cfg := jetstream.OrderedConsumerConfig{FilterSubjects: r.filter}
		cons, err := js.OrderedConsumer(ctx, r.subj.EventsStream(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		// The project's codec as the event stage uses it: one decoder a reader, its
		// room reused.
		dec := pipeline.EventDecoder{Families: fams}
		cc, err := cons.Consume(func(m jetstream.Msg) {
			typ, err := r.subj.StoredType(m.Subject())
			if err != nil {
				b.Error(err)
				return
			}
			evs, _, err := dec.Decode(typ, m.Data(), m.Headers())
			if err != nil {
				b.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for i := range evs {
				count(&evs[i])
			}
			if counted += len(evs); counted == b.N {
				close(done)
			}
		})
		if err != nil {
			b.Fatal(err)
		}
		defer cc.Stop()
	}
	publish(js)
	published := b.Elapsed()
	<-done
	b.StopTimer()
	perEvent := reportCPU(b, cpu)
	heap.report(b, "event")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	return published, perEvent
}

// benchTally publishes b.N events (likes tenths of them likes) in batches to one tallyd
// in this process (mod changes its configuration) and waits until every partition has
// applied them, then checks every count.
func benchTally(b *testing.B, likes int, mod func(*node.Config)) {
	benchTallyMix(b, func(n int) ([]pipeline.Event, map[uint64][2]uint64) { return benchMix(n, likes) }, mod)
}

// benchTallyMix is benchTally of the events mix makes.
func benchTallyMix(b *testing.B, mix func(n int) ([]pipeline.Event, map[uint64][2]uint64), mod func(*node.Config)) {
	n, c := rig.StartNode(b, func(c *node.Config) {
		c.Partitions, c.FlushInterval = 16, 100*time.Millisecond
		if mod != nil {
			mod(c)
		}
	})
	evs, want := mix(b.N)
	puts, heap, cpu := badgerPuts(), heapNow(), cpuTime()
	b.ResetTimer()
	publishBench(b, c, evs)
	published := b.Elapsed()
	rig.WaitCaughtUp(b, c)
	b.StopTimer()
	reportCPU(b, cpu)
	heap.report(b, "event")
	b.ReportMetric(float64(b.N)/published.Seconds(), "published/s")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	checkBench(b, c, want)
	b.ReportMetric(float64(n.CounterStats.Flushed.Load())/float64(b.N), "writes/event")
	b.ReportMetric(float64(badgerPuts()-puts)/float64(b.N), "badger-puts/event")
	b.ReportMetric(float64(b.N)/float64(n.EventStats.Txns.Load()), "events/txn")
	if nl := likesIn(evs); nl > 0 {
		b.ReportMetric(float64(n.EventStats.LikeKeys.Load())/float64(nl), "like-keys/like")
	}
}

// cpuTime is the CPU time (user and system) this process has spent so far: tallyd, the
// embedded NATS server and the benchmark's producer together. CPU per event compares
// runs on a machine that other work shares, where events per second would mostly
// measure the others.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the CPU spent since from per event, in µs, and returns it.
func reportCPU(b *testing.B, from time.Duration) float64 {
	perEvent := float64((cpuTime() - from).Microseconds()) / float64(b.N)
	b.ReportMetric(perEvent, "cpu-µs/event")
	return perEvent
}

// ownStreams are Tally's streams, each with the unit its messages an event are
// reported in (reportOwnMsgs): on the events stream, the hop batches.
func ownStreams(sj pipeline.Subjects) [4][2]string {
	return [4][2]string{{sj.EventsStream(), "hop-msgs/event"}, {sj.DeltasStream(), "delta-msgs/event"},
		{sj.ChangesStream(), "change-msgs/event"}, {sj.LogStream(), "log-msgs/event"}}
}

// ownMsgs is how many messages each of Tally's streams has stored so far.
func ownMsgs(b *testing.B, js jetstream.JetStream, sj pipeline.Subjects) map[string]uint64 {
	n := map[string]uint64{}
	for _, st := range ownStreams(sj) {
		s, err := js.Stream(context.Background(), st[0]) // its info, as it is now
		if err != nil {
			b.Fatal(err)
		}
		n[st[0]] = s.CachedInfo().State.LastSeq
	}
	return n
}

// reportOwnMsgs reports the messages Tally published itself since from (ownMsgs), an
// event: hop batches (the events stream's beyond the producer's published), delta
// batches, change events and log records.
func reportOwnMsgs(b *testing.B, js jetstream.JetStream, sj pipeline.Subjects, from map[string]uint64, published int) {
	now := ownMsgs(b, js, sj)
	for _, st := range ownStreams(sj) {
		n := now[st[0]] - from[st[0]]
		if st[0] == sj.EventsStream() {
			n -= uint64(published)
		}
		b.ReportMetric(float64(n)/float64(b.N), st[1])
	}
}

// heapUse is how many heap allocations this process has made and their bytes: tallyd,
// the embedded NATS server and the benchmark's producer together.
type heapUse struct{ allocs, bytes uint64 }

func heapNow() heapUse {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return heapUse{ms.Mallocs, ms.TotalAlloc}
}

// report reports the allocations and bytes allocated since h, per b.N of unit.
func (h heapUse) report(b *testing.B, unit string) {
	now := heapNow()
	b.ReportMetric(float64(now.allocs-h.allocs)/float64(b.N), "allocs/"+unit)
	b.ReportMetric(float64(now.bytes-h.bytes)/float64(b.N), "alloc-B/"+unit)
}

// likesIn counts the likes of evs.
func likesIn(evs []pipeline.Event) int {
	n := 0
	for _, e := range evs {
		if e.Type == "like" {
			n++
		}
	}
	return n
}

// badgerPuts is how many keys the cold tier has written in this process (every key set
// or deleted by a transaction committed: cold.Counted; Badger's own counter, before
// the thirty-fourth session, also counted a mark for each transaction, and a key
// written twice in one transaction once).
func badgerPuts() int64 { return cold.Counted().Writes }

// publishBench publishes evs as the Go client does, about benchBatch events a message
// per partition.
func publishBench(b *testing.B, c *client.Client, evs []pipeline.Event) {
	for i := 0; i < len(evs); i += benchBatch * 16 {
		if err := c.PublishBatch(context.Background(), "bench."+strconv.Itoa(i), evs[i:min(i+benchBatch*16, len(evs))]); err != nil {
			b.Fatal(err)
		}
	}
}

// checkBench fails the benchmark unless every count is exact.
func checkBench(b *testing.B, c interface {
	Get(context.Context, string, ...uint64) (*pipeline.GetReply, error)
}, want map[uint64][2]uint64) {
	ids := make([]uint64, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	for len(ids) > 0 {
		k := min(len(ids), 1000)
		r, err := c.Get(context.Background(), "post", ids[:k]...)
		if err != nil {
			b.Fatal(err)
		}
		for i, id := range ids[:k] {
			if w := want[id]; r.Counts[i][0] != w[0] || r.Counts[i][3] != w[1] {
				b.Fatalf("post %d: like %d view %d, want %v", id, r.Counts[i][0], r.Counts[i][3], w)
			}
		}
		ids = ids[k:]
	}
}

// BenchmarkHealth is the cost of tally.health on one tallyd of 16 partitions caught up
// (64 partitions looked at twice, as a readiness probe or a benchmark's wait asks it):
// its latency, and the CPU of the whole process per check.
// Run: go test ./stages/systest -run XXX -bench Health -benchtime 300x
func BenchmarkHealth(b *testing.B) {
	_, c := rig.StartNode(b, func(c *node.Config) { c.Partitions = 16 })
	evs, _ := benchEvents(100_000)
	if err := c.PublishBatch(context.Background(), "warm", evs); err != nil {
		b.Fatal(err)
	}
	rig.WaitCaughtUp(b, c)
	lat := make([]time.Duration, 0, b.N)
	cpu := cpuTime()
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		h, err := c.Health(context.Background())
		if err != nil || !h.OK {
			b.Fatalf("health: %+v %v", h, err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/float64(b.N), "cpu-µs/check")
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkGet20 is the latency of a 20-id batch query over loopback, beside a bare NATS
// request-reply echo of the same size, and the CPU and allocations of each (the whole
// process: the asker, NATS, and tallyd or the echo).
// Run: go test ./stages/systest -run XXX -bench Get20 -benchtime 20000x
func BenchmarkGet20(b *testing.B) {
	var cpu time.Duration
	var heap heapUse
	report := func(b *testing.B, lat []time.Duration) {
		b.ReportMetric(float64((cpuTime()-cpu).Nanoseconds())/1e3/float64(b.N), "cpu-µs/get")
		heap.report(b, "get")
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	}
	start := func(b *testing.B) {
		b.ResetTimer()
		cpu, heap = cpuTime(), heapNow()
	}
	ids := make([]uint64, 20)
	b.Run("nats-echo", func(b *testing.B) {
		s := natstest.Start(b)
		nc := natstest.Connect(b, s)
		if _, err := nc.Subscribe("echo", func(m *nats.Msg) { _ = m.Respond(make([]byte, 200)) }); err != nil {
			b.Fatal(err)
		}
		req, _ := pipeline.Marshal(pipeline.GetRequest{IDs: make([]pipeline.ID, 20)}, false)
		lat := make([]time.Duration, 0, b.N)
		start(b)
		for range b.N {
			t0 := time.Now()
			if _, err := nc.Request("echo", req, time.Second); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t0))
		}
		report(b, lat)
	})
	// one is a tallyd of 16 partitions with NATS embedded.
	one := func(b *testing.B) *client.Client {
		_, c := rig.StartNode(b, func(c *node.Config) { c.Partitions = 16 })
		return c
	}
	// gets reads 20 ids drawn from posts at a time from the tallyd given, once the
	// events evs are counted.
	gets := func(b *testing.B, tallyd func(*testing.B) *client.Client, evs []pipeline.Event, posts []uint64) {
		c := tallyd(b)
		if err := c.PublishBatch(context.Background(), "warm", evs); err != nil {
			b.Fatal(err)
		}
		rig.WaitCaughtUp(b, c)
		r := rand.New(rand.NewSource(2))
		lat := make([]time.Duration, 0, b.N)
		start(b)
		for range b.N {
			for i := range ids {
				ids[i] = posts[r.Intn(len(posts))]
			}
			t0 := time.Now()
			if _, err := c.Get(context.Background(), "post", ids...); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t0))
		}
		report(b, lat)
	}
	// Posts of long ago (snowflake-sized ids of the first minutes): cold, so each get
	// reads them through the cold cache, and from Badger what it does not hold.
	b.Run("tally", func(b *testing.B) {
		evs, _ := benchEvents(100_000)
		posts := make([]uint64, 100_000)
		for i := range posts {
			posts[i] = 1<<41 + uint64(i)
		}
		gets(b, one, evs, posts)
	})
	// Posts of the last hour, each viewed once: in the counter partitions' tables.
	recent := func() ([]pipeline.Event, []uint64) {
		evs, _, want := largeViews(100_000, 0)
		posts := slices.Collect(maps.Keys(want))
		slices.Sort(posts)
		return evs, posts
	}
	b.Run("tally-recent", func(b *testing.B) {
		evs, posts := recent()
		gets(b, one, evs, posts)
	})
	// The same of two tallyd sharing the 16 partitions (in this process, on one NATS
	// server, no standbys): the one a get reaches asks the other for half its ids, a
	// request for each of the other's partitions.
	b.Run("tally-recent-two", func(b *testing.B) {
		evs, posts := recent()
		gets(b, twoTallyd, evs, posts)
	})
}

// twoTallyd starts two tallyd in this process on one NATS server, sharing 16 partitions
// (8 each, no standbys), and returns a client of them.
func twoTallyd(b *testing.B) *client.Client {
	_, c, _ := startTwo(b)
	return c
}

// startTwo is twoTallyd, and the URL of their NATS server.
func startTwo(b *testing.B) (string, *client.Client, []*node.Node) {
	url, c := rig.NATSServer(b)
	var ns []*node.Node
	for range 2 {
		ns = append(ns, rig.StartJoiner(b, url, func(c *node.Config) { c.Partitions, c.Standbys, c.BackupEvery = 16, false, 30*time.Second }))
	}
	rig.Eventually(b, "each tallyd owns 8 partitions", func() (bool, string) {
		return len(ns[0].Parts()) == 8 && len(ns[1].Parts()) == 8, fmt.Sprint(ns[0].Parts(), ns[1].Parts())
	})
	return url, c, ns
}
