package client_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/natstest"
)

// slowDialer dials at once the first time and after a pause every time after: a client
// that reconnects is connected nowhere meanwhile.
type slowDialer struct {
	dials atomic.Int32
	pause time.Duration
}

func (d *slowDialer) Dial(network, address string) (net.Conn, error) {
	if d.dials.Add(1) > 1 {
		time.Sleep(d.pause)
	}
	return net.Dial(network, address)
}

// A get in flight when the client's NATS server goes is asked again once the client has
// reconnected to another server of the cluster, and answered. Its answer had been sent
// while the client was connected nowhere, and was lost: the get waited out its timeout
// (TestReadsThroughNATSServerLoss lost a get sent as its server went in some runs).
func TestRequestAskedAgainAfterReconnect(t *testing.T) {
	cl := natstest.StartCluster(t, 2)
	rc := natstest.Connect(t, cl.Servers[1]) // the tallyd that answers, on the server that stays
	reply := sevenLikes(t)
	var armed atomic.Bool
	var asked atomic.Int32
	arrived := make(chan struct{}, 8)
	gone := make(chan struct{})
	if _, err := rc.Subscribe("tally.get.post", func(m *nats.Msg) {
		if armed.Load() && asked.Add(1) == 1 {
			arrived <- struct{}{}
			<-gone // answered once the client's server is gone, before it has reconnected
		}
		_ = m.Respond(reply)
	}); err != nil {
		t.Fatal(err)
	}
	if err := rc.Flush(); err != nil {
		t.Fatal(err)
	}

	dialer := &slowDialer{pause: 500 * time.Millisecond}
	nc, err := nats.Connect(cl.URLs(), nats.DontRandomize(), nats.SetCustomDialer(dialer),
		nats.ReconnectWait(10*time.Millisecond), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if nc.ConnectedServerName() != cl.Servers[0].Name() {
		t.Fatalf("connected to %s, want the first server", nc.ConnectedServerName())
	}
	c, err := client.New(nc, client.WithTimeout(30*time.Second)) // sent again at a reconnect, long before a quarter of this
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	natstest.Eventually(t, 10*time.Second, "the answerer reached through the first server", func() (bool, string) {
		_, err := c.Get(ctx, "post", 42)
		return err == nil, "get: " + errString(err)
	})

	armed.Store(true)
	type result struct {
		r   *pipeline.GetReply
		err error
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		r, err := c.Get(ctx, "post", 42)
		done <- result{r, err}
	}()
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the get never reached its answerer")
	}
	cl.Stop(0)
	natstest.Eventually(t, 10*time.Second, "the staying server without its route", func() (bool, string) {
		return cl.Servers[1].NumRoutes() == 0, "routes up"
	})
	close(gone)
	res := <-done
	if res.err != nil {
		t.Fatalf("get in flight as its server went: %v after %v (asked %d times)", res.err, time.Since(start).Round(time.Millisecond), asked.Load())
	}
	if len(res.r.Counts) != 1 || len(res.r.Counts[0]) != 1 || res.r.Counts[0][0] != 7 {
		t.Fatalf("answer %+v, want 7 likes", res.r)
	}
	if n := asked.Load(); n != 2 {
		t.Fatalf("asked %d times, want twice: once before the server went, once after the client reconnected", n)
	}
	if nc.ConnectedServerName() != cl.Servers[1].Name() {
		t.Fatalf("connected to %s, want the second server", nc.ConnectedServerName())
	}
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}

// A request lost inside NATS, the client's connection never going anywhere (routed to a
// server as it stopped: TestReadsThroughNATSServerLoss lost one so), is sent once more
// after a quarter of its time, and answered; one answered at once is sent once.
func TestRequestUnansweredAskedOnceMore(t *testing.T) {
	nc := natstest.Connect(t, natstest.Start(t))
	reply := sevenLikes(t)
	var lose atomic.Bool
	var asked atomic.Int32
	if _, err := nc.Subscribe("tally.get.post", func(m *nats.Msg) {
		asked.Add(1)
		if lose.CompareAndSwap(true, false) {
			return // lost on the way: never answered
		}
		_ = m.Respond(reply)
	}); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(nc, client.WithTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.Get(ctx, "post", 42); err != nil || asked.Load() != 1 {
		t.Fatalf("a get answered at once: %v, asked %d times, want once", err, asked.Load())
	}
	asked.Store(0)
	lose.Store(true)
	r, err := c.Get(ctx, "post", 42)
	if err != nil {
		t.Fatalf("a get whose first request was lost: %v (asked %d times)", err, asked.Load())
	}
	if len(r.Counts) != 1 || r.Counts[0][0] != 7 || asked.Load() != 2 {
		t.Fatalf("answer %+v after being asked %d times, want 7 likes, asked twice", r, asked.Load())
	}
	// Given too little time to send it again, a request is sent once.
	asked.Store(0)
	lose.Store(true)
	short, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	defer cancel()
	if _, err := c.Get(short, "post", 42); !errors.Is(err, client.ErrUnavailable) || asked.Load() != 1 {
		t.Fatalf("a lost get given 150 ms: %v, asked %d times; want unavailable, asked once", err, asked.Load())
	}
}

// sevenLikes is a get reply of one post liked seven times.
func sevenLikes(t *testing.T) []byte {
	t.Helper()
	reply, err := pipeline.Marshal(pipeline.GetReply{Fields: []string{"like"}, Counts: [][]uint64{{7}}}, false)
	if err != nil {
		t.Fatal(err)
	}
	return reply
}
