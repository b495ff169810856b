package query

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/stages/flow"
	"github.com/tally-dev/tally/store/cold"
)

// Partition is one counter partition that can answer for its ids.
type Partition interface {
	Get(ctx context.Context, ids []uint64, out [][]uint64) error
	// Ready reports whether the partition has loaded its state.
	Ready() bool
	Lagger
}

// Sender is a Partition that takes a get without waiting for its answer
// (counter.Worker): a request hands each such partition its ids, then waits for them
// all, with no goroutine each. The function Send returns waits for the answer, as Get,
// and is called once.
type Sender interface {
	Send(ctx context.Context, ids []uint64, out [][]uint64) (wait func() error)
}

// Lagger is anything whose lag health and metrics report (a partition).
type Lagger interface {
	Behind(ctx context.Context) (flow.Behind, error)
}

// Config configures a Server.
type Config struct {
	Subjects   pipeline.Subjects
	Families   pipeline.Families
	Partitions int
	// Timeout bounds how long a request waits for its partitions.
	Timeout time.Duration
	// HandOver is how long a request waits for a partition that no process serves —
	// one stopped it and the next has not started it yet — before it answers the
	// partition unavailable (0: DefaultHandOver; negative: not at all).
	HandOver time.Duration
	// Workers is the number of subscriptions per subject (each has its own goroutine).
	Workers int
	// OnQuery, when set, is told every request's subject kind, duration and failure.
	OnQuery func(kind string, took time.Duration, failed bool)
	// OnAudit, when set, is told how many counters each audit compared and how many
	// of them drifted (see audit.go).
	OnAudit func(checked, drifted int)
	// MaxLag is how far a partition may lag and be ready (see health.go); the zero
	// value allows no lag.
	MaxLag MaxLag
	// TopEvery is how often watched tops are ranked again and published when changed
	// (see topwatch.go; 100 ms when 0: the partitions rank them at each flush tick), and
	// TopWatchFor how long after its last watch request (pipeline.TopWatchFor when 0).
	TopEvery    time.Duration
	TopWatchFor time.Duration
}

// Server answers queries. It keeps a registry of the counter partitions this process
// owns (family → partition number → Partition, nil when not here): ids of those are
// answered in-process, ids of the others are asked of their owner over NATS. It keeps a
// registry of the event partitions owned here too (SetStage), whose relations it reads
// from its own Badger for the relation queries, which it asks of the owner for the
// others (see events.go): every process answers every query.
type Server struct {
	cfg    Config
	nc     *nats.Conn
	heal   healer // of nc, after a released subscription's drain (release.go)
	db     *cold.DB
	log    *slog.Logger
	unread pipeline.Family
	// owners is the registry: an immutable map with a slice of cfg.Partitions entries per
	// configured family, replaced whole by SetOwner, so queries read it without a lock.
	owners atomic.Pointer[map[string][]Partition]

	// stages is the registry of the event partitions owned here: cfg.Partitions entries,
	// nil where not here, replaced whole by SetStage (see events.go).
	stages atomic.Pointer[[]Stage]

	auditing auditState // repairs, one at a time (see audit.go)
	watches  watches    // the tops watched (see topwatch.go)
	// watchStop ends, and watchDone tells the end of, the publishing of watched tops.
	watchStop, watchDone chan struct{}

	mu       sync.Mutex // serialises SetOwner, SetStage, Start and Stop
	started  bool
	inFlight atomic.Int64 // requests being answered (see Stop)
	// jobs hands requests to idle answerers, of which there are answerers (see endpoint
	// in micro.go).
	jobs      chan *job
	answerers atomic.Int64
	subs      []*nats.Subscription           // the peer subject's (see peers.go) and the gets' at this process (where.go)
	peers     *peers                         // where other processes serve partitions (see peers.go)
	svcs      services                       // the query service's instances (see micro.go)
	partSubs  map[partKey]*nats.Subscription // <prefix>.part.<family>.<p> of each registered partition
	standbys  map[partKey]Standby            // the standbys kept here (see standby.go)
	sbSubs    map[partKey]*nats.Subscription // <prefix>.standby.<family>.<p> of each of them
	evSubs    map[int]*nats.Subscription     // <prefix>.part.ev.<p> of each registered stage
}

type partKey struct {
	family string
	p      int
}

// New returns a server; Start subscribes it. owners is the initial registry (a nil entry
// is a partition not here); later changes go through SetOwner.
func New(cfg Config, nc *nats.Conn, db *cold.DB, owners map[string][]Partition, log *slog.Logger) *Server {
	if cfg.HandOver == 0 {
		cfg.HandOver = DefaultHandOver
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 4
	}
	if cfg.TopEvery <= 0 {
		cfg.TopEvery = 100 * time.Millisecond
	}
	if cfg.TopWatchFor <= 0 {
		cfg.TopWatchFor = pipeline.TopWatchFor
	}
	un, _ := cfg.Families.Lookup(pipeline.FamilyUnread)
	s := &Server{cfg: cfg, nc: nc, db: db, log: log.With("stage", "query"), unread: un,
		partSubs: map[partKey]*nats.Subscription{}, evSubs: map[int]*nats.Subscription{},
		standbys: map[partKey]Standby{}, sbSubs: map[partKey]*nats.Subscription{}, jobs: make(chan *job),
		peers: newPeers(cfg.Families, cfg.Partitions)}
	stages := make([]Stage, cfg.Partitions)
	s.stages.Store(&stages)
	reg := make(map[string][]Partition, len(cfg.Families))
	for _, f := range cfg.Families {
		reg[f.Name] = make([]Partition, cfg.Partitions)
	}
	for fam, ps := range owners {
		if reg[fam] == nil {
			s.log.Warn("ignoring the partitions of a family not configured", "family", fam)
			continue
		}
		for p, o := range ps {
			if p >= cfg.Partitions {
				s.log.Warn("ignoring a partition beyond the configured count", "family", fam, "partition", p, "partitions", cfg.Partitions)
				continue
			}
			reg[fam][p] = o
		}
	}
	s.owners.Store(&reg)
	return s
}

// SetOwner registers part as partition p of family in this process, or removes it when
// part is nil (an untyped nil). It is safe while queries run. While the server is started,
// a registered partition is served to other processes on <prefix>.part.<family>.<p>
// (queue group PartQueueGroup) and a removed one stops being served (see release: its
// subscription is drained, so that requests still queued are answered that it is not
// here, unless the connection is away). SetOwner panics when family is not configured
// or p is out of range, as an index out of range would.
func (s *Server) SetOwner(family string, p int, part Partition) {
	if _, err := s.cfg.Families.Lookup(family); err != nil {
		panic(fmt.Sprintf("query.SetOwner: %v", err))
	}
	if p < 0 || p >= s.cfg.Partitions {
		panic(fmt.Sprintf("query.SetOwner: partition %d out of range 0..%d", p, s.cfg.Partitions-1))
	}
	s.mu.Lock()
	old := *s.owners.Load()
	reg := maps.Clone(old)
	ps := slices.Clone(old[family])
	ps[p] = part
	reg[family] = ps
	s.owners.Store(&reg)
	subscribed := false
	if s.started {
		key := partKey{family, p}
		sub, ok := s.partSubs[key]
		switch {
		case part != nil && !ok:
			if err := s.subscribePart(key); err != nil {
				s.log.Error("cannot serve a partition to other processes", "family", family, "partition", p, "err", err)
			} else {
				subscribed = true
			}
		case part == nil && ok:
			s.release(sub)
			delete(s.partSubs, key)
		}
	}
	s.mu.Unlock()
	if subscribed {
		// Once SetOwner returns, the server knows the subscription: requests from now on
		// reach it.
		if err := s.nc.FlushTimeout(s.cfg.Timeout); err != nil {
			s.log.Warn("cannot flush a partition subscription", "family", family, "partition", p, "err", err)
		}
	}
}

// subscribePart serves a registered partition to other processes; s.mu is held.
func (s *Server) subscribePart(key partKey) error {
	subj := s.cfg.Subjects.Part(key.family, key.p)
	sub, err := s.nc.QueueSubscribe(subj, PartQueueGroup, s.handleOwned("part", s.part(key)))
	if err != nil {
		return fmt.Errorf("cannot subscribe %s: %w", subj, err)
	}
	s.partSubs[key] = sub
	return nil
}

// QueueGroup is the queue group every query subscription joins, so several processes
// share the load.
const QueueGroup = "tally-query"

// PartQueueGroup is the queue group of the <prefix>.part.<family>.<p> subscriptions: the
// processes owning a partition (one, or two for a moment during a hand-over) share them.
const PartQueueGroup = "tally-part"

// Start subscribes every query subject, and the part subject of every partition and
// event partition registered here.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.start(); err != nil {
		s.stop()
		return err
	}
	s.started = true
	return s.nc.Flush()
}

func (s *Server) start() error {
	sj := s.cfg.Subjects
	handlers := s.relationHandlers()
	handlers[sj.Prefix+".get.*"] = s.get
	handlers[sj.Prefix+".top.*"] = s.top
	if err := s.startServices(); err != nil {
		return err
	}
	if err := s.subscribe(handlers); err != nil {
		return err
	}
	// Queue group PartQueueGroup, as the part subjects: one subscriber, but the
	// permissions of tallyd's user are those of <prefix>.part.> (deploy/README.md).
	peer, err := s.nc.QueueSubscribe(sj.Peers(s.peers.token), PartQueueGroup, s.handlePeer)
	if err != nil {
		return fmt.Errorf("cannot subscribe %s: %w", sj.Peers(s.peers.token), err)
	}
	s.subs = append(s.subs, peer)
	at, err := s.nc.QueueSubscribe(sj.GetsAt(s.peers.token), QueueGroup, s.handleGetAt)
	if err != nil {
		return fmt.Errorf("cannot subscribe %s: %w", sj.GetsAt(s.peers.token), err)
	}
	s.subs = append(s.subs, at)
	for fam, ps := range *s.owners.Load() {
		for p, o := range ps {
			if o != nil {
				if err := s.subscribePart(partKey{fam, p}); err != nil {
					return err
				}
			}
		}
	}
	for p, st := range *s.stages.Load() {
		if st != nil {
			if err := s.subscribeEvents(p); err != nil {
				return err
			}
		}
	}
	for key, sb := range s.standbys {
		if err := s.subscribeStandby(key, sb); err != nil {
			return err
		}
	}
	s.watchStop, s.watchDone = make(chan struct{}), make(chan struct{})
	go s.publishWatched(s.watchStop, s.watchDone)
	return nil
}

// Stop drains the subscriptions and returns once the requests already received are
// answered (within Timeout): the process may close its connection then, and no request
// it took is left without an answer.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	subs := slices.Concat(s.subs, slices.Collect(maps.Values(s.partSubs)), slices.Collect(maps.Values(s.evSubs)), slices.Collect(maps.Values(s.sbSubs)))
	s.stop()
	// A draining subscription is valid until it has handed its last message over; a
	// service's endpoints say nothing, so the answers under way are counted too, until
	// none has been for a moment.
	deadline := time.Now().Add(s.cfg.Timeout)
	for quiet := 0; quiet < 3 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		quiet++
		if s.inFlight.Load() > 0 || slices.ContainsFunc(subs, (*nats.Subscription).IsValid) {
			quiet = 0
		}
	}
}

func (s *Server) stop() {
	for _, sub := range s.subs {
		s.release(sub)
	}
	s.subs = nil
	s.stopServices()
	for k, sub := range s.partSubs {
		s.release(sub)
		delete(s.partSubs, k)
	}
	for p, sub := range s.evSubs {
		s.release(sub)
		delete(s.evSubs, p)
	}
	for k, sub := range s.sbSubs {
		s.release(sub)
		delete(s.sbSubs, k)
	}
	if s.watchStop != nil {
		close(s.watchStop)
		<-s.watchDone
		s.watchStop, s.watchDone = nil, nil
	}
	s.started = false
}

type request struct {
	msg    *nats.Msg
	asJSON bool
	ctx    context.Context
	// peer: sent by another tallyd (the part and standby subjects), whose unknown fields
	// are skipped (pipeline.DecodePeerRequest) so that a rolling upgrade may add some.
	peer bool
	// hdr holds the headers a handler sets on its reply (a failed one's too).
	hdr nats.Header
}

// setHeader sets a header of the reply to r.
func (r *request) setHeader(key, value string) {
	if r.hdr == nil {
		r.hdr = nats.Header{}
	}
	r.hdr.Set(key, value)
}

func (r *request) decode(v any) error {
	if r.peer {
		return pipeline.DecodePeerRequest(r.msg.Data, r.asJSON, v)
	}
	return pipeline.DecodeRequest(r.msg.Data, r.asJSON, v)
}

// errorReply is the reply to any request that failed; Code tells a client which
// sentinel error to return (pipeline.ErrorCode).
type errorReply struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

// handle answers kind's requests on a plain subscription (the part subjects between
// processes; the others are endpoints of the query service, see micro.go).
func (s *Server) handle(kind string, h func(*request) (any, error)) nats.MsgHandler {
	return func(m *nats.Msg) {
		if m.Reply == "" {
			return // a publish, not a request: there is no one to answer
		}
		a := s.answer(kind, h, m, true)
		_ = m.RespondMsg(&nats.Msg{Subject: m.Reply, Data: a.data, Header: a.hdr})
	}
}

// handleOwned is handle for a partition's subject: a reply that answered names this
// process's peer token (peerHeader), so that the asker may ask it for several of its
// partitions at once (peers.go).
func (s *Server) handleOwned(kind string, h func(*request) (any, error)) nats.MsgHandler {
	return func(m *nats.Msg) {
		if m.Reply == "" {
			return // a publish, not a request: there is no one to answer
		}
		a := s.answer(kind, h, m, true)
		if a.code == "" {
			if a.hdr == nil {
				a.hdr = nats.Header{}
			}
			a.hdr.Set(peerHeader, s.peers.token)
		}
		_ = m.RespondMsg(&nats.Msg{Subject: m.Reply, Data: a.data, Header: a.hdr})
	}
}

// answer is an encoded reply with its headers; a failed request's also has its code
// and error text.
type answer struct {
	data          []byte
	hdr           nats.Header
	code, failure string
}

// answer runs h for m and encodes its reply (JSON to a JSON request); a failed request
// gets an errorReply.
func (s *Server) answer(kind string, h func(*request) (any, error), m *nats.Msg, peer bool) answer {
	var (
		data          []byte
		hdr           nats.Header
		code, failure string
	)
	s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout)
	defer cancel()
	r := &request{msg: m, asJSON: pipeline.IsJSON(m.Data, m.Header), ctx: ctx, peer: peer}
	reply, err := h(r)
	failed, gone := err != nil, errors.Is(err, errGone)
	if err != nil {
		if !errors.Is(err, pipeline.ErrBadRequest) && !errors.Is(err, pipeline.ErrUnknownFamily) && !errors.Is(err, errUnavailable) {
			s.log.Warn("query failed", "subject", m.Subject, "err", err)
		}
		code, failure = pipeline.ErrorCode(err), err.Error()
		reply = errorReply{Error: failure, Code: code}
	}
	data, err = pipeline.Marshal(reply, r.asJSON)
	if err != nil {
		code, failure = pipeline.CodeInternal, "cannot encode reply: "+err.Error()
		data, _ = pipeline.Marshal(errorReply{Error: failure, Code: code}, r.asJSON)
	}
	if r.asJSON {
		r.setHeader("Content-Type", pipeline.ContentTypeJSON)
	}
	if gone { // a hand-over: the asker asks again (see request)
		r.setHeader(goneHeader, "1")
	}
	hdr = r.hdr
	// NATS counts the headers in max_payload (micro adds none to a reply that succeeds).
	if max := s.nc.MaxPayload(); int64((&nats.Msg{Data: data, Header: hdr}).Size()) > max {
		// NATS would refuse it, and the asker would only see its request time out.
		failed, code = true, pipeline.CodeBadRequest
		failure = fmt.Sprintf("%v: the reply of %d bytes is larger than the NATS server takes (max_payload %d): ask for fewer ids at a time", pipeline.ErrBadRequest, len(data), max)
		data, _ = pipeline.Marshal(errorReply{Error: failure, Code: code}, r.asJSON)
	}
	if s.cfg.OnQuery != nil {
		s.cfg.OnQuery(kind, time.Since(start), failed)
	}
	return answer{data, hdr, code, failure}
}
