package flow_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline/natstest"
	"github.com/tally-dev/tally/stages/flow"
)

// spreadRig is a server with stream S (subjects s.>) and a Spread of a connection to
// it, whose further connections dial makes to the server's url.
type spreadRig struct {
	t   *testing.T
	ctx context.Context
	js  jetstream.JetStream
	sp  *flow.Spread
}

func newSpreadRig(t *testing.T, dial func(url string) (*nats.Conn, error), log *slog.Logger) *spreadRig {
	s := natstest.Start(t)
	js, err := jetstream.New(natstest.Connect(t, s))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	sp := flow.NewSpread(js, 4<<20, func() (*nats.Conn, error) { return dial(s.ClientURL()) }, log)
	t.Cleanup(sp.Close)
	return &spreadRig{t: t, ctx: ctx, js: js, sp: sp}
}

// read starts a Reader of s.<i> through the Spread and checks it reads what is
// published there.
func (r *spreadRig) read(i int) *flow.Reader {
	t := r.t
	subj := fmt.Sprintf("s.%d", i)
	if _, err := r.js.Publish(r.ctx, subj, []byte(subj)); err != nil {
		t.Fatal(err)
	}
	rd, err := flow.Read(r.ctx, r.sp, "S", subj, 0, flow.Buffer{Msgs: 8, Bytes: 4 << 20}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rd.Stop)
	select {
	case m := <-rd.C:
		if string(m.Data()) != subj {
			t.Fatalf("reader of %s read %q", subj, m.Data())
		}
	case <-r.ctx.Done():
		t.Fatalf("reader of %s read nothing", subj)
	}
	return rd
}

// Readers through a Spread are made on connections of its own, as many to each as
// keep their pulls under flow.ConnPulls (four pulling 8 MiB, the embedded server's
// payload), each reads its subject, and a stopped one's room is taken by the next.
func TestSpreadKeepsEachConnectionUnderItsPulls(t *testing.T) {
	dialed := 0
	r := newSpreadRig(t, func(url string) (*nats.Conn, error) {
		dialed++
		return nats.Connect(url)
	}, slog.New(slog.DiscardHandler))
	sp := r.sp
	if got, want := sp.PerConn(), flow.ConnPulls/(8<<20); got != want {
		t.Fatalf("%d readers a connection, want %d", got, want)
	}
	var rs []*flow.Reader
	for i := range 10 {
		rs = append(rs, r.read(i))
	}
	if sp.Conns() != 3 || dialed != 3 {
		t.Fatalf("10 readers on %d connections (%d dialed), want 3", sp.Conns(), dialed)
	}
	for _, rd := range rs[:4] {
		rd.Stop()
	}
	natstest.Eventually(t, 10*time.Second, "4 readers' room given back", func() (bool, string) {
		return sp.Readers() == 6, fmt.Sprint(sp.Readers(), " readers")
	})
	for i := range 4 {
		r.read(10 + i)
	}
	if sp.Conns() != 3 || dialed != 3 {
		t.Fatalf("10 readers, 4 stopped and 4 more on %d connections (%d dialed), want 3", sp.Conns(), dialed)
	}
}

// A Spread that cannot open another connection (an account's max_connections) puts the
// next Reader on the connection with the fewest, and says so once: a Reader that does
// not read would stop its partition, where one on a full connection only risks a
// slow consumer's cut-off.
func TestSpreadSharesWhenNoConnectionCanBeMade(t *testing.T) {
	var logs bytes.Buffer
	dialed := 0
	r := newSpreadRig(t, func(url string) (*nats.Conn, error) {
		if dialed++; dialed > 1 {
			return nil, errors.New("maximum connections exceeded")
		}
		return nats.Connect(url)
	}, slog.New(slog.NewTextHandler(&logs, nil)))
	sp := r.sp
	for i := range 2 * sp.PerConn() {
		r.read(i)
	}
	if sp.Conns() != 1 || sp.Readers() != 2*sp.PerConn() {
		t.Fatalf("%d readers on %d connections, want %d on 1", sp.Readers(), sp.Conns(), 2*sp.PerConn())
	}
	if n := strings.Count(logs.String(), "cannot open another NATS connection"); n != 1 {
		t.Fatalf("said %d times that no connection could be made, want once:\n%s", n, logs.String())
	}
}
