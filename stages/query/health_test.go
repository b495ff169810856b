package query_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/natstest"
	"github.com/tally-dev/tally/stages/flow"
	"github.com/tally-dev/tally/stages/query"
)

func TestParseMaxLag(t *testing.T) {
	f := func(t *testing.T, in string, want query.MaxLag, wantErr bool) {
		t.Helper()
		got, err := query.ParseMaxLag(in)
		if (err != nil) != wantErr || got != want {
			t.Errorf("ParseMaxLag(%q) = %+v, %v; want %+v, error %v", in, got, err, want, wantErr)
		}
		if err != nil && !errors.Is(err, query.ErrMaxLag) {
			t.Errorf("ParseMaxLag(%q): %v is not ErrMaxLag", in, err)
		}
		if err == nil && got.String() != in && in != "0s" {
			t.Errorf("ParseMaxLag(%q).String() = %q", in, got.String())
		}
	}
	f(t, "10000", query.MaxLag{Msgs: 10000}, false)
	f(t, "30s", query.MaxLag{Age: 30 * time.Second}, false)
	f(t, "1m30s", query.MaxLag{Age: 90 * time.Second}, false)
	f(t, "0", query.MaxLag{}, false)
	f(t, "0s", query.MaxLag{}, false)
	f(t, "-5s", query.MaxLag{}, true)
	f(t, "-5", query.MaxLag{}, true)
	f(t, "lots", query.MaxLag{}, true)
}

func TestMaxLagExceeded(t *testing.T) {
	f := func(t *testing.T, m query.MaxLag, b flow.Behind, want bool) {
		t.Helper()
		if got := m.Exceeded(b); got != want {
			t.Errorf("%v.Exceeded(%+v) = %v, want %v", m, b, got, want)
		}
	}
	// The zero MaxLag allows nothing unapplied (the old rule of /healthz).
	f(t, query.MaxLag{}, flow.Behind{}, false)
	f(t, query.MaxLag{}, flow.Behind{Msgs: 1}, true)
	// Messages: up to the count.
	f(t, query.MaxLag{Msgs: 100}, flow.Behind{Msgs: 100, Age: time.Hour}, false)
	f(t, query.MaxLag{Msgs: 100}, flow.Behind{Msgs: 101}, true)
	// Time: however many messages, as long as the oldest is young enough.
	f(t, query.MaxLag{Age: time.Second}, flow.Behind{Msgs: 1_000_000, Age: 200 * time.Millisecond}, false)
	f(t, query.MaxLag{Age: time.Second}, flow.Behind{Msgs: 1, Age: 2 * time.Second}, true)
}

// lagPart is a counter partition with a given lag.
type lagPart struct {
	memPart
	loaded bool
	b      flow.Behind
	err    error
}

func (l *lagPart) Ready() bool                                 { return l.loaded }
func (l *lagPart) Behind(context.Context) (flow.Behind, error) { return l.b, l.err }

// TestHealthReady: a process is ready while every partition is loaded and within its
// max lag, although some lag (not OK); a partition beyond it, or still loading, is named.
func TestHealthReady(t *testing.T) {
	const n = 2
	mk := func(max query.MaxLag, parts ...*lagPart) *query.Server {
		owners := map[string][]query.Partition{"post": make([]query.Partition, n)}
		for p, l := range parts {
			owners["post"][p] = l
		}
		return query.New(query.Config{Subjects: pipeline.NewSubjects("tally"), Families: families, Partitions: n, MaxLag: max},
			nil, nil, owners, slog.New(slog.DiscardHandler))
	}
	ctx := context.Background()
	steady := flow.Behind{Msgs: 40, Age: 120 * time.Millisecond}

	h, err := mk(query.MaxLag{Age: 30 * time.Second}, &lagPart{loaded: true, b: steady}, &lagPart{loaded: true}).Health(ctx)
	if err != nil || !h.Ready || h.OK || h.Checked != 2 || h.Lagging["counter.post.0"] != 40 || h.BehindMs["counter.post.0"] != 120 || h.MaxLag != "30s" {
		t.Errorf("steady lag: %+v %v, want ready, not OK, lagging counter.post.0 by 40 (120 ms)", h, err)
	}
	h, err = mk(query.MaxLag{Msgs: 10}, &lagPart{loaded: true, b: steady}, &lagPart{loaded: false}).Health(ctx)
	if err != nil || h.Ready || !slices.Equal(h.NotReady, []string{"counter.post.0", "counter.post.1"}) {
		t.Errorf("40 messages behind of 10 allowed, one loading: %+v %v, want both not ready", h, err)
	}
	h, err = mk(query.MaxLag{}, &lagPart{loaded: true}).Health(ctx)
	if err != nil || !h.Ready || !h.OK {
		t.Errorf("caught up: %+v %v", h, err)
	}
	if h, err = mk(query.MaxLag{Age: time.Minute}, &lagPart{loaded: true, err: errors.New("no answer")}).Health(ctx); err == nil {
		t.Errorf("a lag not looked up: %+v, want an error", h)
	}
	lags := mk(query.MaxLag{Age: time.Minute}, &lagPart{loaded: true, err: errors.New("no answer")}, &lagPart{loaded: true}).Lags(ctx)
	if len(lags) != 2 || lags[0].Err == nil || lags[1].Err != nil || lags[1].Stage != "counter" || lags[1].Family != "post" || lags[1].Partition != 1 || !lags[1].Ready(query.MaxLag{}) {
		t.Errorf("lags: %+v, want the failed lookup and the other partition", lags)
	}
}

// TestHealthOfThePrefix: tally.health, answered by any process, asks the owner of every
// event stage and counter partition not held there, and judges them all by the
// answering process's max lag: a partition far behind in time makes the prefix not
// ready, one a little behind does not.
func TestHealthOfThePrefix(t *testing.T) {
	const n = 2
	s := natstest.Start(t)
	post, _ := families.Lookup("post")
	fams := pipeline.Families{post}
	start := func(prefix string, max query.MaxLag, p int, part query.Partition, stage query.Lagger) {
		owners := map[string][]query.Partition{"post": make([]query.Partition, n)}
		owners["post"][p] = part
		srv := query.New(query.Config{Subjects: pipeline.NewSubjects(prefix), Families: fams, Partitions: n, MaxLag: max, Timeout: 5 * time.Second},
			natstest.Connect(t, s), nil, owners, slog.New(slog.DiscardHandler))
		srv.SetStage(p, &fakeStage{lag: stage})
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Stop)
	}
	// One process: partition 0, its stage 3 messages behind (0.1 s); another: partition
	// 1, whose counters are 2 s behind. Both processes of a prefix have one max lag.
	behind := &lagPart{loaded: true, b: flow.Behind{Msgs: 40, Age: 2 * time.Second}}
	start("tally", query.MaxLag{Age: time.Second}, 1, behind, nil)
	start("other", query.MaxLag{Age: 5 * time.Second}, 1, behind, nil)
	nc := natstest.Connect(t, s)
	ask := func(prefix string) pipeline.HealthReply {
		t.Helper()
		m, err := nc.Request(prefix+".health", []byte("{}"), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var h pipeline.HealthReply
		if err := pipeline.UnmarshalReply(m.Data, true, &h); err != nil {
			t.Fatal(err)
		}
		if h.Version != pipeline.ProtocolVersion {
			t.Errorf("health reply of protocol version %q, want %q", h.Version, pipeline.ProtocolVersion)
		}
		return h
	}
	stage0 := &lagPart{loaded: true, b: flow.Behind{Msgs: 3, Age: 100 * time.Millisecond}}
	start("tally", query.MaxLag{Age: time.Second}, 0, &lagPart{loaded: true}, stage0)
	start("other", query.MaxLag{Age: 5 * time.Second}, 0, &lagPart{loaded: true}, stage0)
	for range 8 { // whichever process answers, most likely both in 8 asks
		// Two partitions here, two asked of the other process.
		h := ask("tally")
		if h.Ready || h.OK || h.Checked != 4 || !slices.Equal(h.NotReady, []string{"counter.post.1"}) || h.Lagging["counter.post.1"] != 40 ||
			h.BehindMs["counter.post.1"] != 2000 || h.Lagging["event.0"] != 3 || h.BehindMs["event.0"] != 100 || h.MaxLag != "1s" {
			t.Errorf("a partition 2 s behind, 1 s allowed: %+v, want not ready", h)
		}
		if h = ask("other"); !h.Ready || h.OK || len(h.NotReady) != 0 || h.Lagging["counter.post.1"] != 40 || h.Lagging["event.0"] != 3 {
			t.Errorf("a partition 2 s behind, 5 s allowed: %+v, want ready, not OK", h)
		}
	}
}

// script is a partition whose every look (Behind) finds the next of looks, then the
// last one again.
type script struct {
	memPart
	mu    sync.Mutex
	looks []flow.Behind
}

func (s *script) Behind(context.Context) (flow.Behind, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.looks[0]
	if len(s.looks) > 1 {
		s.looks = s.looks[1:]
	}
	return b, nil
}

// TestHealthCaughtUpTogether: health says OK only when every partition is caught up at
// one moment, not each at the moment it was looked at. Event partition 0, looked at
// first, is caught up; partition 1, looked at after it, has just handed it a hop batch
// and is caught up too. One look at each said OK while the hop's like was in flight (a
// benchmark of batches not split by partition read a count one short). The look after
// finds partition 0 lagging, or at a later place than the first time: not OK, until two
// looks find everything where it was.
func TestHealthCaughtUpTogether(t *testing.T) {
	const n = 2
	ctx := context.Background()
	mk := func(stage0 *script) *query.Server {
		owners := map[string][]query.Partition{"post": {&lagPart{loaded: true}, &lagPart{loaded: true}}}
		srv := query.New(query.Config{Subjects: pipeline.NewSubjects("tally"), Families: families, Partitions: n},
			nil, nil, owners, slog.New(slog.DiscardHandler))
		srv.SetStage(0, &fakeStage{lag: stage0})
		srv.SetStage(1, &fakeStage{lag: &script{looks: []flow.Behind{{Pos: 20}}}})
		return srv
	}
	for _, c := range []struct {
		name  string
		looks []flow.Behind
		lag   uint64
	}{
		{"applied it between the looks", []flow.Behind{{Pos: 10}, {Pos: 11}}, 1},
		{"not yet applied", []flow.Behind{{Pos: 10}, {Pos: 10, Msgs: 1}, {Pos: 11}}, 1},
		{"applied three", []flow.Behind{{Pos: 10}, {Pos: 13}}, 3},
	} {
		srv := mk(&script{looks: c.looks})
		h, err := srv.Health(ctx)
		if err != nil || h.OK || h.Lagging["event.0"] != c.lag || len(h.Applied) != 0 {
			t.Errorf("%s: %+v %v, want not OK, event.0 lagging by %d", c.name, h, err, c.lag)
		}
		for range 2 { // the first of these may still see the place move
			h, err = srv.Health(ctx)
		}
		if err != nil || !h.OK || !h.Ready {
			t.Errorf("%s, then still: %+v %v, want OK", c.name, h, err)
		}
	}
}

// TestPrefixHealthCaughtUpTogether: the same across processes: the owner of a partition
// says where it is (applied, protocol 1.7), and the asking process looks twice.
func TestPrefixHealthCaughtUpTogether(t *testing.T) {
	const n = 2
	s := natstest.Start(t)
	post, _ := families.Lookup("post")
	fams := pipeline.Families{post}
	start := func(p int, stage query.Lagger) {
		owners := map[string][]query.Partition{"post": make([]query.Partition, n)}
		owners["post"][p] = &lagPart{loaded: true}
		srv := query.New(query.Config{Subjects: pipeline.NewSubjects("tally"), Families: fams, Partitions: n, Timeout: 5 * time.Second},
			natstest.Connect(t, s), nil, owners, slog.New(slog.DiscardHandler))
		srv.SetStage(p, &fakeStage{lag: stage})
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Stop)
	}
	// Either process may answer: each one's stage is looked at once per look of the
	// prefix, here or asked by the other.
	start(0, &script{looks: []flow.Behind{{Pos: 10}, {Pos: 11}}})
	start(1, &script{looks: []flow.Behind{{Pos: 20}, {Pos: 22}}})
	nc := natstest.Connect(t, s)
	health := func() (h pipeline.HealthReply) {
		t.Helper()
		ask(t, nc, "tally.health", nil, struct{}{}, &h)
		return h
	}
	if h := health(); h.OK || h.Lagging["event.0"] != 1 || h.Lagging["event.1"] != 2 || h.Checked != 4 || len(h.Applied) != 0 {
		t.Errorf("both stages moved between the looks: %+v, want not OK, event.0 by 1, event.1 by 2", h)
	}
	if h := health(); !h.OK {
		t.Errorf("nothing moved: %+v, want OK", h)
	}
}
