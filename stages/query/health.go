package query

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/stages/flow"
)

// MaxLag is how far a partition may be behind its stream and still be ready (tallyd
// --max-lag): a number of messages, or a duration, the age of the oldest message it has
// not applied yet (see flow.Behind). A time is what a health check should use: under a
// steady load a partition is always some messages behind, and how many grows with the
// rate, while the age of its oldest unapplied message stays about one flush interval.
// The zero MaxLag is the strictest: ready only when everything is applied.
type MaxLag struct {
	Msgs uint64
	Age  time.Duration
}

// ParseMaxLag reads "10000" (messages) or "30s" (a duration); "0" is the zero MaxLag.
func ParseMaxLag(s string) (MaxLag, error) {
	if n, err := strconv.ParseUint(s, 10, 64); err == nil {
		return MaxLag{Msgs: n}, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return MaxLag{}, fmt.Errorf("%w, not %q", ErrMaxLag, s)
	}
	return MaxLag{Age: d}, nil
}

// Set implements flag.Value.
func (m *MaxLag) Set(s string) error {
	v, err := ParseMaxLag(s)
	if err == nil {
		*m = v
	}
	return err
}

// String is the form ParseMaxLag reads.
func (m MaxLag) String() string {
	if m.Age > 0 {
		return m.Age.String()
	}
	return strconv.FormatUint(m.Msgs, 10)
}

// Exceeded reports whether b is further behind than m allows.
func (m MaxLag) Exceeded(b flow.Behind) bool {
	switch {
	case m.Age > 0:
		return b.Age > m.Age
	case m.Msgs > 0:
		return b.Msgs > m.Msgs
	}
	return b.Msgs > 0
}

// PartLag is how far one partition of this process is behind, as health and metrics
// see it.
type PartLag struct {
	Name      string // event.<p> or counter.<family>.<p>
	Stage     string // "event" or "counter"
	Family    string // "" for an event stage
	Partition int
	// Loaded is false while a counter partition is still loading its state.
	Loaded bool
	flow.Behind
	// Err is a lag that could not be looked up (NATS did not answer).
	Err error
}

// Ready reports whether the partition is loaded, its lag known and within max.
func (l PartLag) Ready(max MaxLag) bool {
	return l.Loaded && l.Err == nil && !max.Exceeded(l.Behind)
}

// Lags looks up the lag of every partition of this process: the event stages first, so
// that a delta a stage published just before it was looked at is seen by its counter's
// lookup. A failed lookup is reported in its PartLag; the others are still made.
func (s *Server) Lags(ctx context.Context) []PartLag {
	var out []PartLag
	for p, st := range *s.stages.Load() {
		if st != nil {
			out = append(out, stageLag(ctx, p, st))
		}
	}
	owners := *s.owners.Load()
	for _, fam := range s.cfg.Families {
		for p, o := range owners[fam.Name] {
			if o != nil {
				out = append(out, s.counterLag(ctx, fam.Name, p, o))
			}
		}
	}
	return out
}

func stageLag(ctx context.Context, p int, st Stage) PartLag {
	b, err := st.Behind(ctx)
	return PartLag{Name: stageName(p), Stage: "event", Partition: p, Loaded: true, Behind: b, Err: err}
}

func (s *Server) counterLag(ctx context.Context, family string, p int, o Partition) PartLag {
	b, err := o.Behind(ctx)
	return PartLag{Name: counterName(family, p), Stage: "counter", Family: family, Partition: p, Loaded: o.Ready(), Behind: b, Err: err}
}

// Health reports how far the event stages and the counter partitions registered in this
// process are behind: OK when they have applied all of their streams, Ready when each is
// within the configured MaxLag. Partitions owned by other processes are not checked here
// (each process reports its own); Checked says how many were. A lag that cannot be
// looked up is an error: then nobody can tell.
//
// OK is checked twice (see caughtUpTwice), so that it holds at one moment for all of
// them together and not only for each when it was looked at.
func (s *Server) Health(ctx context.Context) (*pipeline.HealthReply, error) {
	return caughtUpTwice(ctx, s.localHealth)
}

// localHealth is one look at the partitions of this process.
func (s *Server) localHealth(ctx context.Context) (*pipeline.HealthReply, error) {
	return s.healthOf(s.Lags(ctx), s.cfg.MaxLag)
}

// caughtUpTwice runs pass, a look at every partition in turn, and when it finds all of
// them caught up, runs it again, which must find each at the place it applied up to the
// first time (HealthReply.Applied). One look is not enough: a partition looked at first
// may be handed work (a hop batch, a delta batch) by one looked at after it, busy until
// then, and each is caught up when looked at, while together they are not; the hop
// batches of a producer's batch not split by partition made tally.health say caught up
// while a like was in flight. Found caught up twice at the same places, no partition
// took a message between the looks, so none held work for another then (a stage is
// busy from taking messages until what they make is stored, and what is stored is
// another's lag until applied). A partition that does not say where it is (a tallyd
// before 1.7) is taken as the first look finds it. The reply it returns names no places:
// they are the looks' own.
func caughtUpTwice(ctx context.Context, pass func(context.Context) (*pipeline.HealthReply, error)) (h *pipeline.HealthReply, err error) {
	defer func() {
		if h != nil {
			h.Applied = nil
		}
	}()
	first, err := pass(ctx)
	if err != nil || !first.OK {
		return first, err
	}
	if h, err = pass(ctx); err != nil || !h.OK {
		return h, err
	}
	for name, pos := range h.Applied {
		if was, ok := first.Applied[name]; !ok || was != pos {
			h.OK = false
			h.Lagging[name] = 1 // applied messages between the looks (or was not there)
			if ok && pos > was {
				h.Lagging[name] = pos - was
			}
		}
	}
	return h, nil
}

func (s *Server) healthOf(lags []PartLag, max MaxLag) (*pipeline.HealthReply, error) {
	h := s.newHealth(max)
	h.Applied = make(map[string]uint64, len(lags))
	for _, l := range lags {
		if l.Err != nil {
			return nil, fmt.Errorf("cannot tell the lag of %s: %w", l.Name, l.Err)
		}
		add(h, l, max)
		h.Applied[l.Name] = l.Pos
	}
	return h, nil
}

func (s *Server) newHealth(max MaxLag) *pipeline.HealthReply {
	return &pipeline.HealthReply{OK: true, Ready: true, MaxLag: max.String(), Partitions: s.cfg.Partitions,
		Lagging: map[string]uint64{}, Version: pipeline.ProtocolVersion}
}

func counterName(family string, p int) string { return fmt.Sprintf("counter.%s.%d", family, p) }

// add adds l to h; a partition not loaded yet lags by at least 1.
func add(h *pipeline.HealthReply, l PartLag, max MaxLag) {
	h.Checked++
	lag := l.Msgs
	if !l.Loaded && lag == 0 {
		lag = 1
	}
	if lag > 0 {
		h.OK = false
		h.Lagging[l.Name] = lag
		if l.Age > 0 {
			if h.BehindMs == nil {
				h.BehindMs = map[string]int64{}
			}
			h.BehindMs[l.Name] = l.Age.Milliseconds()
		}
	}
	if !l.Ready(max) {
		h.Ready = false
		h.NotReady = append(h.NotReady, l.Name)
	}
}

// lagHeader on a request to a partition's subject (a counter partition's or an event
// partition's) asks for its health instead of counts or a query;
// its value is the asker's MaxLag, so that every partition is judged by one rule.
const lagHeader = "Tally-Health"

// health answers for the whole prefix: this process's event stages and counter
// partitions, and every other event stage and counter partition asked of its owner, all
// judged by this process's MaxLag; a partition that no process owns (in hand-over) is
// lagging and not ready. Any process answers it.
func (s *Server) health(r *request) (any, error) {
	return caughtUpTwice(r.ctx, s.prefixHealth)
}

// prefixHealth is one look at every partition of the prefix: this process's, and the
// others' asked of their owners.
func (s *Server) prefixHealth(ctx context.Context) (*pipeline.HealthReply, error) {
	h, err := s.localHealth(ctx)
	if err != nil {
		return nil, err
	}
	type remote struct {
		name  string
		reply pipeline.HealthReply
		err   error
	}
	var asks []*remote
	var wg sync.WaitGroup
	ask := func(name, subject string) {
		a := &remote{name: name}
		asks = append(asks, a)
		wg.Go(func() {
			msg := nats.NewMsg(subject)
			msg.Header.Set(lagHeader, s.cfg.MaxLag.String())
			m, err := s.nc.RequestMsgWithContext(ctx, msg)
			if err == nil {
				err = pipeline.UnmarshalReply(m.Data, false, &a.reply)
			}
			if err == nil && a.reply.Error != "" {
				err = errors.New(a.reply.Error)
			}
			a.err = err
		})
	}
	for p, st := range *s.stages.Load() {
		if st == nil {
			ask(stageName(p), s.cfg.Subjects.PartEvents(p))
		}
	}
	for fam, ps := range *s.owners.Load() {
		for p, o := range ps {
			if o == nil {
				ask(counterName(fam, p), s.cfg.Subjects.Part(fam, p))
			}
		}
	}
	wg.Wait()
	slices.SortFunc(asks, func(a, b *remote) int { return strings.Compare(a.name, b.name) })
	for _, a := range asks {
		h.Checked++
		if a.err != nil {
			h.OK, h.Ready = false, false
			h.Lagging[a.name] = 1
			h.NotReady = append(h.NotReady, a.name)
			s.log.Debug("partition unavailable for health", "partition", a.name, "err", a.err)
			continue
		}
		h.OK = h.OK && a.reply.OK
		// A process without readiness (an older tallyd) is ready when caught up.
		if !a.reply.Ready && !a.reply.OK {
			h.Ready = false
			h.NotReady = append(h.NotReady, a.name)
		}
		maps.Copy(h.Lagging, a.reply.Lagging)
		maps.Copy(h.Applied, a.reply.Applied)
		if len(a.reply.BehindMs) > 0 {
			if h.BehindMs == nil {
				h.BehindMs = map[string]int64{}
			}
			maps.Copy(h.BehindMs, a.reply.BehindMs)
		}
	}
	return h, nil
}

// partHealth is the health of one partition owned here, for another process's health,
// judged by the asker's MaxLag (this process's when the header does not parse).
func (s *Server) partHealth(ctx context.Context, key partKey, asked string) (*pipeline.HealthReply, error) {
	o, err := s.partOwner(key)
	if err != nil {
		return nil, err
	}
	max, err := ParseMaxLag(asked)
	if err != nil {
		max = s.cfg.MaxLag
	}
	return s.healthOf([]PartLag{s.counterLag(ctx, key.family, key.p, o)}, max)
}

// stageHealth is the health of event partition p's stage, for another process's health,
// judged by the asker's MaxLag (this process's when the header does not parse).
func (s *Server) stageHealth(ctx context.Context, p int, st Stage, asked string) (*pipeline.HealthReply, error) {
	if st == nil {
		return nil, fmt.Errorf("%w: event partition %d: %w", errUnavailable, p, errGone)
	}
	max, err := ParseMaxLag(asked)
	if err != nil {
		max = s.cfg.MaxLag
	}
	return s.healthOf([]PartLag{stageLag(ctx, p, st)}, max)
}
