package systest

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand"
	"os"
	"os/exec"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/natstest"
	"github.com/tally-dev/tally/stages/node"
	"github.com/tally-dev/tally/stages/reference"
	"github.com/tally-dev/tally/stages/systest/rig"
)

// jsonEvents makes n events as a producer in another language sends them: 75% likes of
// 20 000 posts of the last hour by 100 000 users, each naming the post's owner (so a like of another
// user's post notifies its owner, in the owner's partition), 25% views — each by one of
// the users when viewers is set (counted in the post's viewers), by nobody said
// otherwise. It returns the expected like and view count of every post, as the
// reference model counts them.
func jsonEvents(tb testing.TB, n int, viewers bool) ([]pipeline.Event, map[uint64][2]uint64) {
	const posts, users = 20_000, 100_000
	r := rand.New(rand.NewSource(2))
	z := rand.NewZipf(r, 1.1, 1, posts-1)
	evs := make([]pipeline.Event, n)
	ref := reference.New()
	// Posts of the last hour, as snowflake ids (most likes and views go to recent posts;
	// posts older than --cold-age live in the cold tier).
	now := uint64(time.Now().UnixMilli() - node.SnowflakeEpoch)
	for i := range evs {
		k := z.Uint64()
		post := (now-k*180)<<22 | k
		if r.Intn(4) < 3 {
			uid := 1 + uint64(r.Intn(users))
			evs[i] = pipeline.Event{Type: "like", UID: pipeline.ID(uid), Post: pipeline.ID(post), Owner: pipeline.ID(1 + post%users)}
		} else {
			evs[i] = pipeline.Event{Type: "view", Post: pipeline.ID(post), N: 1}
			if viewers {
				evs[i].UID = pipeline.ID(1 + uint64(r.Intn(users)))
			}
		}
		e := evs[i]
		e.Seq = uint64(i + 1) // in the order produced: only counts are read, which no order changes
		if err := ref.Apply(e); err != nil {
			tb.Fatal(err)
		}
	}
	want := map[uint64][2]uint64{}
	for _, e := range evs {
		c := ref.Counts("post", uint64(e.Post))
		want[uint64(e.Post)] = [2]uint64{c[0], c[3]} // likes, views
	}
	return evs, want
}

// jsonMsg is one message a JSON producer publishes: its subject's type and key, its
// payload and its message id.
type jsonMsg struct {
	typ, id string
	key     pipeline.ID
	data    []byte
}

// jsonMessages encodes evs as a JSON producer would: one event a message (batch 1), or
// batches of batch events, split by partition (the partition function of the contract)
// or as they come.
func jsonMessages(b *testing.B, evs []pipeline.Event, batch int, split bool) []jsonMsg {
	var msgs []jsonMsg
	add := func(i int, g []pipeline.Event) {
		data, err := json.Marshal(pipeline.Batch{Events: g})
		if err != nil {
			b.Fatal(err)
		}
		msgs = append(msgs, jsonMsg{typ: pipeline.TypeBatch, key: g[0].Key(), id: "j" + strconv.Itoa(i) + "." + strconv.Itoa(len(msgs)), data: data})
	}
	switch {
	case batch == 1:
		for i, e := range evs {
			data, err := json.Marshal(e)
			if err != nil {
				b.Fatal(err)
			}
			msgs = append(msgs, jsonMsg{typ: e.Type, key: e.Key(), id: "j" + strconv.Itoa(i), data: data})
		}
	case split:
		for i := 0; i < len(evs); i += batch * 16 {
			groups := make([][]pipeline.Event, 16)
			for _, e := range evs[i:min(i+batch*16, len(evs))] {
				p := pipeline.PartitionOf(e.Key(), 16)
				groups[p] = append(groups[p], e)
			}
			for _, g := range groups {
				if len(g) > 0 {
					add(i, g)
				}
			}
		}
	default:
		for i := 0; i < len(evs); i += batch {
			add(i, evs[i:min(i+batch, len(evs))])
		}
	}
	return msgs
}

// publishJSON publishes msgs as a JSON producer does (Content-Type application/json,
// Nats-Msg-Id), waiting for every acknowledgement.
func publishJSON(b *testing.B, js jetstream.JetStream, subj pipeline.Subjects, msgs []jsonMsg) {
	publishJSONBy(b, js, func(jsonMsg) pipeline.Subjects { return subj }, msgs)
}

// publishJSONBy is publishJSON with each message under the subjects subj gives it.
func publishJSONBy(b *testing.B, js jetstream.JetStream, subj func(jsonMsg) pipeline.Subjects, msgs []jsonMsg) {
	futures := make([]jetstream.PubAckFuture, 0, len(msgs))
	for _, m := range msgs {
		msg := nats.NewMsg(subj(m).Event(m.typ, m.key))
		msg.Data = m.data
		msg.Header.Set("Content-Type", "application/json")
		f, err := js.PublishMsgAsync(msg, jetstream.WithMsgID(m.id), jetstream.WithStallWait(time.Minute))
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
}

// BenchmarkJSON is events applied per second when a producer in another language sends
// JSON: batches of 1 000 split by partition, batches as they come, and one event a
// message, each beside a trivial consumer of the same messages in the same stream;
// split-viewers is split with every view saying who viewed, and tallyd counting viewers.
// Run: go test ./stages/systest -run XXX -bench JSON -benchtime 200000x
func BenchmarkJSON(b *testing.B) {
	for _, c := range []struct {
		name           string
		batch          int
		split, viewers bool
	}{{"split", 1000, true, false}, {"split-viewers", 1000, true, true}, {"unsplit", 1000, false, false}, {"single", 1, false, false}} {
		b.Run(c.name+"/consume", func(b *testing.B) { benchJSONConsume(b, 0, c.batch, c.split, c.viewers) })
		// The same, doing beside it a floor consumer's Badger work (floorConsumer: each
		// like's record read from Badger and set, and the contract's other entries): the
		// least for likers never seen. Where likers return, as here, Tally keeps their
		// records in RAM and does less: then it is no ceiling.
		b.Run(c.name+"/consume-contract", func(b *testing.B) { benchJSONContract(b, 0, c.batch, c.split, c.viewers) })
		if c.batch == 1 {
			// What reading the stream a partition at a time costs NATS, as the event
			// stages read it: for one event a message, most of what sets Tally apart.
			b.Run(c.name+"/consume-partitioned", func(b *testing.B) { benchJSONConsume(b, 16, c.batch, c.split, c.viewers) })
			b.Run(c.name+"/consume-partitioned-contract", func(b *testing.B) { benchJSONContract(b, 16, c.batch, c.split, c.viewers) })
			// The same partitions read with one consumer a process, filtered on the
			// subjects of the partitions it owns: three tallyd sharing them, and one
			// owning them all.
			b.Run(c.name+"/consume-by-process", func(b *testing.B) { benchJSONConsume(b, 3, c.batch, c.split, c.viewers) })
			b.Run(c.name+"/consume-one-process", func(b *testing.B) { benchJSONConsume(b, 1, c.batch, c.split, c.viewers) })
			// And each partition in a stream of its own, read without a filter.
			b.Run(c.name+"/consume-streams", func(b *testing.B) { benchJSONConsume(b, streamAPartition, c.batch, c.split, c.viewers) })
		}
		b.Run(c.name+"/tally", func(b *testing.B) { benchJSONTally(b, c.batch, c.split, c.viewers) })
	}
}

// benchJSONConsume is the trivial consumer (consumeBy, its readers: 0 is one for the
// whole stream) of the same JSON messages.
func benchJSONConsume(b *testing.B, readers, batch int, split, viewers bool) {
	benchJSONConsumeWith(b, readers, batch, split, viewers, nil)
}

// benchJSONContract is benchJSONConsume that gives every event to a contract floor
// consumer (floorConsumer) as well.
func benchJSONContract(b *testing.B, readers, batch int, split, viewers bool) {
	f := newFloorConsumer(b, true)
	defer f.close()
	benchJSONConsumeWith(b, readers, batch, split, viewers, f.count)
	f.checkStored()
	b.ReportMetric(float64(f.puts)/float64(b.N), "badger-puts/event")
}

// benchJSONConsumeWith is benchJSONConsume that also gives every event to also, when
// it is not nil.
func benchJSONConsumeWith(b *testing.B, readers, batch int, split, viewers bool, also func(*pipeline.Event)) {
	evs, want := jsonEvents(b, b.N, viewers)
	msgs := jsonMessages(b, evs, batch, split)
	got := make(map[uint64][2]uint64, len(want))
	liked := map[[2]uint64]bool{}
	consumeBy(b, readers, func(js jetstream.JetStream) {
		whole := pipeline.NewSubjects("")
		subj := func(jsonMsg) pipeline.Subjects { return whole }
		if readers == streamAPartition {
			parts := make([]pipeline.Subjects, 16) // named once, not for each message
			for p := range parts {
				parts[p] = pipeline.NewSubjects(partitionPrefix(p))
			}
			subj = func(m jsonMsg) pipeline.Subjects { return parts[pipeline.PartitionOf(m.key, 16)] }
		}
		publishJSONBy(b, js, subj, msgs)
	}, func(e *pipeline.Event) {
		w := got[uint64(e.Post)]
		if e.Type == "like" {
			if k := [2]uint64{uint64(e.UID), uint64(e.Post)}; !liked[k] {
				liked[k] = true
				w[0]++
			}
		} else {
			w[1] += uint64(e.N)
		}
		got[uint64(e.Post)] = w
		if also != nil {
			also(e)
		}
	})
	for id, w := range want {
		if got[id] != w {
			b.Fatalf("post %d: counted %v, want %v", id, got[id], w)
		}
	}
}

// benchJSONTally is the same messages published to one tallyd in this process, timed
// until every partition has applied them; then every count is checked.
func benchJSONTally(b *testing.B, batch int, split, viewers bool) {
	n, c := rig.StartNode(b, func(c *node.Config) {
		c.Partitions, c.FlushInterval = 16, 100*time.Millisecond
		if viewers {
			c.Families = pipeline.WithViewers(c.Families)
		}
	})
	js, err := jetstream.New(c.Conn(), jetstream.WithPublishAsyncMaxPending(8192))
	if err != nil {
		b.Fatal(err)
	}
	evs, want := jsonEvents(b, b.N, viewers)
	msgs := jsonMessages(b, evs, batch, split)
	sent := ownMsgs(b, js, c.Subjects())
	misses := n.EventStats.ResidentMisses.Load()
	heap, puts, cpu := heapNow(), badgerPuts(), cpuTime()
	b.ResetTimer()
	publishJSON(b, js, c.Subjects(), msgs)
	rig.WaitCaughtUp(b, c)
	b.StopTimer()
	reportCPU(b, cpu)
	reportOwnMsgs(b, js, c.Subjects(), sent, len(msgs))
	// What the event partitions read of their users' state from Badger, not from RAM.
	b.ReportMetric(float64(n.EventStats.ResidentMisses.Load()-misses)/float64(b.N), "state-reads/event")
	heap.report(b, "event")
	b.ReportMetric(float64(badgerPuts()-puts)/float64(b.N), "badger-puts/event")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(b.N)/float64(n.EventStats.Txns.Load()), "events/txn")
	checkBench(b, c, want)
}

// BenchmarkGet20Loaded is the latency of a 20-id get while a JSON producer publishes
// split batches at a steady rate (TALLY_LOAD_RATE events a second, 100 000), beside a bare NATS request-reply echo
// of the same size answered by the same server: the two are asked in turn, so both see
// the same load. one is a tallyd owning all 16 partitions, two two tallyd sharing them
// (the client asks each for its own partitions' ids, at once), in this process or
// (two-procs) each in its own. sched is how long this process's goroutines waited to
// run meanwhile.
// Run: go test ./stages/systest -run XXX -bench Get20Loaded -benchtime 5000x
func BenchmarkGet20Loaded(b *testing.B) {
	b.Run("one", func(b *testing.B) {
		n, c := rig.StartNode(b, func(c *node.Config) { c.Partitions, c.FlushInterval = 16, 100*time.Millisecond })
		get20Loaded(b, n.ClientURL(), c, false, n)
	})
	b.Run("two", func(b *testing.B) {
		url, c, ns := startTwo(b)
		get20Loaded(b, url, c, false, ns...)
	})
	// one-procs and two-procs are one and two as tallyd processes of cmd/tallyd built
	// from this tree, the NATS server, the load and the gets in this one, as in a
	// deployment; the echo is answered by a process of its own too (echoChild).
	for n, name := range map[int]string{1: "one-procs", 2: "two-procs"} {
		b.Run(name, func(b *testing.B) {
			url := natstest.Start(b).ClientURL()
			_, c := rig.StartTallyds(b, rig.Tallyd(b), url, n, "--standbys=false")
			startEchoChild(b, url)
			get20Loaded(b, url, c, true)
		})
	}
}

// echoChild, set to a NATS server's URL, makes the test binary a process that answers
// requests on "echo" there with 200 bytes until killed (see TestMain).
const echoChild = "TALLY_ECHO_CHILD"

// runEchoChild is the process echoChild asks for.
func runEchoChild(url string) int {
	nc, err := nats.Connect(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if _, err := nc.Subscribe("echo", func(m *nats.Msg) { _ = m.Respond(make([]byte, 200)) }); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := nc.Flush(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	select {}
}

// startEchoChild starts a process answering "echo" on the NATS server at url, killed at
// cleanup, and waits until it answers.
func startEchoChild(b *testing.B, url string) {
	cmd := exec.Command(os.Args[0], "-test.run=XXX")
	cmd.Env = append(os.Environ(), echoChild+"="+url)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	nc, err := nats.Connect(url)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	rig.Eventually(b, "the echo process answers", func() (bool, string) {
		_, err := nc.Request("echo", nil, time.Second)
		return err == nil, fmt.Sprint(err)
	})
}

// get20Loaded is BenchmarkGet20Loaded of the tallyd c asks, on the NATS server at url.
// Requests on "echo" are answered by this process unless echoed says a process of its
// own answers them (startEchoChild). Of the tallyd given in ns (those in this process),
// it reports the share of the partitions' reads the requests did themselves
// (read-by-get-%, counter.Stats.Peeked) rather than handed to a busy worker.
func get20Loaded(b *testing.B, url string, c *client.Client, echoed bool, ns ...*node.Node) {
	nc := c.Conn()
	if !echoed {
		if _, err := nc.Subscribe("echo", func(m *nats.Msg) { _ = m.Respond(make([]byte, 200)) }); err != nil {
			b.Fatal(err)
		}
	}
	posts, stop := steadyLoad(b, url, c)
	req, _ := pipeline.Marshal(pipeline.GetRequest{IDs: make([]pipeline.ID, 20)}, false)
	r := rand.New(rand.NewSource(2))
	ids := make([]uint64, 20)
	echo := make([]time.Duration, 0, b.N)
	get := make([]time.Duration, 0, b.N)
	sched0 := schedLatencies()
	reads := func() (peeked, queued int64) {
		for _, n := range ns {
			peeked, queued = peeked+n.CounterStats.Peeked.Load(), queued+n.CounterStats.Queued.Load()
		}
		return peeked, queued
	}
	peeked0, queued0 := reads()
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if _, err := nc.Request("echo", req, 5*time.Second); err != nil {
			b.Fatal(err)
		}
		echo = append(echo, time.Since(t0))
		for i := range ids {
			ids[i] = posts[r.Intn(len(posts))]
		}
		t0 = time.Now()
		if _, err := c.Get(context.Background(), "post", ids...); err != nil {
			b.Fatal(err)
		}
		get = append(get, time.Since(t0))
	}
	b.StopTimer()
	stop()
	reportLatency(b, "echo", echo)
	reportLatency(b, "get", get)
	reportSched(b, sched0, schedLatencies())
	b.ReportMetric(float64(get[len(get)*99/100])/float64(echo[len(echo)*99/100]), "p99-ratio")
	if peeked, queued := reads(); len(ns) > 0 && peeked+queued > peeked0+queued0 {
		b.ReportMetric(100*float64(peeked-peeked0)/float64(peeked-peeked0+queued-queued0), "read-by-get-%")
	}
}

// BenchmarkCountLatency is how long an event takes to be counted — a view of a post no
// event named before, published by the Go client (acked: until its publish is
// acknowledged), until a get of that post, asked again as soon as answered, counts it —
// while a JSON producer publishes split batches at a steady rate (steadyLoad,
// TALLY_LOAD_RATE events a second) to one tallyd of 16 partitions; beside it, in turn,
// the same message published to a stream of its own on the same server until an
// ordered consumer of it is handed it (stream): what JetStream alone takes under the
// same load. Gets are asked back to back, not after a sleep: a 200 µs sleep took ~1 ms
// here, which the first version of this benchmark measured. sched is how long the
// process's goroutines waited to run meanwhile.
// Run: go test ./stages/systest -run XXX -bench CountLatency -benchtime 2000x
func BenchmarkCountLatency(b *testing.B) {
	n, c := rig.StartNode(b, func(c *node.Config) { c.Partitions, c.FlushInterval = 16, 100*time.Millisecond })
	ctx := context.Background()
	js, err := jetstream.New(c.Conn())
	if err != nil {
		b.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "PROBE", Subjects: []string{"probe"}}); err != nil {
		b.Fatal(err)
	}
	cons, err := js.OrderedConsumer(ctx, "PROBE", jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverNewPolicy})
	if err != nil {
		b.Fatal(err)
	}
	delivered := make(chan struct{}, 1)
	cc, err := cons.Consume(func(jetstream.Msg) { delivered <- struct{}{} })
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Stop()
	_, stop := steadyLoad(b, n.ClientURL(), c)
	var stream, counted, acked []time.Duration
	sched0 := schedLatencies()
	b.ResetTimer()
	for i := range b.N {
		post := uint64(1<<50 + i)
		e := pipeline.Event{Type: "view", Post: pipeline.ID(post), N: 1, Tx: fmt.Sprintf("probe-%d", i)}
		data, err := pipeline.Marshal(&e, false)
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		if _, err := js.Publish(ctx, "probe", data); err != nil {
			b.Fatal(err)
		}
		select {
		case <-delivered:
		case <-time.After(10 * time.Second):
			b.Fatal("the probe stream's consumer was not handed its message")
		}
		stream = append(stream, time.Since(t0))
		t0 = time.Now()
		if err := c.Publish(ctx, e); err != nil {
			b.Fatal(err)
		}
		acked = append(acked, time.Since(t0))
		for {
			r, err := c.Get(ctx, "post", post)
			if err != nil {
				b.Fatal(err)
			}
			if len(r.Counts) == 1 && r.Counts[0][3] == 1 { // like, repost, comment, view
				break
			}
		}
		counted = append(counted, time.Since(t0))
	}
	b.StopTimer()
	reportSched(b, sched0, schedLatencies())
	stop()
	reportLatency(b, "stream", stream)
	reportLatency(b, "counted", counted)
	reportLatency(b, "acked", acked)
}

// BenchmarkTopLoaded is the latency of a top 100 by likes over the hour (tally.top.post)
// under the steady load of BenchmarkGet20Loaded — 75 % of it likes of 20 000 posts, so
// every ranking changes while it is asked — beside a 20-id get asked in turn.
// Run: go test ./stages/systest -run XXX -bench TopLoaded -benchtime 2000x
func BenchmarkTopLoaded(b *testing.B) {
	n, c := rig.StartNode(b, func(c *node.Config) { c.Partitions, c.FlushInterval = 16, 100*time.Millisecond })
	ctx := context.Background()
	posts, stop := steadyLoad(b, n.ClientURL(), c)
	rig.Eventually(b, "the load ranks 100 posts", func() (bool, string) {
		t, err := c.Top(ctx, "post", "like", "1h", 100)
		return err == nil && len(t.IDs) == 100, fmt.Sprint(err)
	})
	r := rand.New(rand.NewSource(2))
	ids := make([]uint64, 20)
	var top, get []time.Duration
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		t, err := c.Top(ctx, "post", "like", "1h", 100)
		if err != nil || len(t.IDs) != 100 {
			b.Fatalf("top: %v, %d ids", err, len(t.IDs))
		}
		top = append(top, time.Since(t0))
		for i := range ids {
			ids[i] = posts[r.Intn(len(posts))]
		}
		t0 = time.Now()
		if _, err := c.Get(ctx, "post", ids...); err != nil {
			b.Fatal(err)
		}
		get = append(get, time.Since(t0))
	}
	b.StopTimer()
	stop()
	reportLatency(b, "top", top)
	reportLatency(b, "get20", get)
}

// reportLatency reports the p50 and p99 of lat, in µs, named name.
func reportLatency(b *testing.B, name string, lat []time.Duration) {
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), name+"-p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), name+"-p99-µs")
}

// steadyLoad starts a JSON producer on a connection of its own publishing split batches
// (jsonEvents, 75 % likes of 20 000 posts of the last hour) to n at a steady rate
// (TALLY_LOAD_RATE events a second, 100 000), the same messages again and again under new
// ids. It returns the posts the load touches, and stop, which ends the load and reports
// the rate it kept (load-events/s).
func steadyLoad(b *testing.B, url string, c interface{ Subjects() pipeline.Subjects }) ([]uint64, func()) {
	// The producer has a connection of its own, as it would in a process of its own:
	// on the readers' one, their requests would wait behind its batches.
	pc, err := nats.Connect(url)
	if err != nil {
		b.Fatal(err)
	}
	js, err := jetstream.New(pc, jetstream.WithPublishAsyncMaxPending(256))
	if err != nil {
		b.Fatal(err)
	}
	evs, want := jsonEvents(b, 200_000, false)
	msgs := jsonMessages(b, evs, 1000, true)
	posts := slices.Collect(maps.Keys(want))
	ctx, cancel := context.WithCancel(context.Background())
	loaded := make(chan struct{})
	var published atomic.Int64
	rate := 100_000 // events a second: what tallyd here applies with room to spare
	if v, err := strconv.Atoi(os.Getenv("TALLY_LOAD_RATE")); err == nil && v > 0 {
		rate = v
	}
	go func() { // the load: the same messages again and again, each time under new ids
		defer close(loaded)
		start, sent := time.Now(), 0
		for round := 0; ctx.Err() == nil; round++ {
			for _, m := range msgs {
				if ctx.Err() != nil {
					return
				}
				// paced: a message is sent when the rate says it is due
				if due := start.Add(time.Duration(sent) * time.Second / time.Duration(rate)); time.Until(due) > 0 {
					time.Sleep(time.Until(due))
				}
				msg := nats.NewMsg(c.Subjects().Event(m.typ, m.key))
				msg.Data = m.data
				msg.Header.Set("Content-Type", "application/json")
				// A loaded machine may not keep the rate: the producer then waits, and
				// load-events/s says what was kept.
				if _, err := js.PublishMsgAsync(msg, jetstream.WithMsgID(strconv.Itoa(round)+"."+m.id), jetstream.WithStallWait(time.Minute)); err != nil {
					b.Error(err)
					return
				}
				k := strings.Count(string(m.data), `"type"`)
				sent += k
				published.Add(int64(k))
			}
		}
	}()
	start := time.Now()
	return posts, func() {
		cancel()
		<-loaded
		pc.Close()
		b.ReportMetric(float64(published.Load())/time.Since(start).Seconds(), "load-events/s")
	}
}

// schedLatencies is how long the process's goroutines have waited, runnable, to run
// (runtime/metrics), so far.
func schedLatencies() *metrics.Float64Histogram {
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(s)
	return s[0].Value.Float64Histogram()
}

// reportSched reports the p50, p99 and p999 of the waits to run between h0 and h1 (the
// upper bound of the bucket each falls in), in µs: what two cores shared by tallyd, its
// NATS server and the load add to every hand-over between goroutines.
func reportSched(b *testing.B, h0, h1 *metrics.Float64Histogram) {
	counts := make([]uint64, len(h1.Counts))
	var total uint64
	for i := range counts {
		counts[i] = h1.Counts[i] - h0.Counts[i]
		total += counts[i]
	}
	q := func(f float64) float64 {
		var n uint64
		for i, c := range counts {
			n += c
			if float64(n) >= f*float64(total) {
				return h1.Buckets[i+1] * 1e6
			}
		}
		return 0
	}
	b.ReportMetric(q(0.5), "sched-p50-µs")
	b.ReportMetric(q(0.99), "sched-p99-µs")
	b.ReportMetric(q(0.999), "sched-p999-µs")
}
