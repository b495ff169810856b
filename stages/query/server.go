package query

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/store/cold"
)

// Partition is one counter partition that can answer for its ids.
type Partition interface {
	Get(ctx context.Context, ids []uint64, out [][]uint64) error
	Ready() bool
	Lag(ctx context.Context) (uint64, error)
}

// Lagger is anything else whose lag health reports (an event-stage partition).
type Lagger interface {
	Lag(ctx context.Context) (uint64, error)
}

// Config configures a Server.
type Config struct {
	Subjects   pipeline.Subjects
	Families   pipeline.Families
	Partitions int
	// Timeout bounds how long a request waits for its partitions.
	Timeout time.Duration
	// Workers is the number of subscriptions per subject (each has its own goroutine).
	Workers int
	// Stages are reported by health beside the counter partitions, by name.
	Stages map[string]Lagger
	// Pulled is the set of authors whose posts readers pull.
	Pulled *cold.Pulled
	// OnQuery, when set, is told every request's subject kind, duration and failure.
	OnQuery func(kind string, took time.Duration, failed bool)
}

// Server answers queries. Owners maps a family to its partitions, indexed by number.
type Server struct {
	cfg    Config
	nc     *nats.Conn
	db     *cold.DB
	owners map[string][]Partition
	log    *slog.Logger
	subs   []*nats.Subscription
	unread pipeline.Family
}

// New returns a server; Start subscribes it.
func New(cfg Config, nc *nats.Conn, db *cold.DB, owners map[string][]Partition, log *slog.Logger) *Server {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 4
	}
	un, _ := cfg.Families.Lookup(pipeline.FamilyUnread)
	return &Server{cfg: cfg, nc: nc, db: db, owners: owners, log: log.With("stage", "query"), unread: un}
}

// QueueGroup is the queue group every query subscription joins, so several processes
// share the load.
const QueueGroup = "tally-query"

// Start subscribes every query subject.
func (s *Server) Start() error {
	sj := s.cfg.Subjects
	handlers := map[string]func(*request) (any, error){
		sj.Prefix + ".get.*": s.get,
		sj.Liked():           s.liked,
		sj.LikesUser():       s.list(cold.Like, true, "uid"),
		sj.LikesPost():       s.list(cold.Like, false, "post"),
		sj.Following():       s.list(cold.Follow, true, "uid"),
		sj.Followers():       s.list(cold.Follow, false, "uid"),
		sj.Unread():          s.unreadCounts,
		sj.Health():          s.health,
	}
	for subj, h := range handlers {
		kind := strings.TrimPrefix(strings.TrimSuffix(subj, ".*"), sj.Prefix+".")
		for range s.cfg.Workers {
			sub, err := s.nc.QueueSubscribe(subj, QueueGroup, s.handle(kind, h))
			if err != nil {
				s.Stop()
				return fmt.Errorf("cannot subscribe %s: %w", subj, err)
			}
			s.subs = append(s.subs, sub)
		}
	}
	return s.nc.Flush()
}

// Stop drains the subscriptions: requests already received are answered.
func (s *Server) Stop() {
	for _, sub := range s.subs {
		_ = sub.Drain()
	}
	s.subs = nil
}

type request struct {
	msg    *nats.Msg
	asJSON bool
	ctx    context.Context
}

func (r *request) decode(v any) error {
	if err := pipeline.Unmarshal(r.msg.Data, r.asJSON, v); err != nil {
		return fmt.Errorf("%w: %w", pipeline.ErrBadRequest, err)
	}
	return nil
}

// errorReply is the reply to any request that failed.
type errorReply struct {
	Error string `json:"error"`
}

func (s *Server) handle(kind string, h func(*request) (any, error)) nats.MsgHandler {
	return func(m *nats.Msg) {
		if m.Reply == "" {
			return // a publish, not a request: there is no one to answer
		}
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout)
		defer cancel()
		r := &request{msg: m, asJSON: pipeline.IsJSON(m.Data, m.Header), ctx: ctx}
		reply, err := h(r)
		failed := err != nil
		if err != nil {
			if !errors.Is(err, pipeline.ErrBadRequest) && !errors.Is(err, pipeline.ErrUnknownFamily) {
				s.log.Warn("query failed", "subject", m.Subject, "err", err)
			}
			reply = errorReply{Error: err.Error()}
		}
		data, err := pipeline.Marshal(reply, r.asJSON)
		if err != nil {
			data, _ = pipeline.Marshal(errorReply{Error: "cannot encode reply: " + err.Error()}, r.asJSON)
		}
		out := &nats.Msg{Subject: m.Reply, Data: data}
		if r.asJSON {
			out.Header = nats.Header{"Content-Type": []string{pipeline.ContentTypeJSON}}
		}
		_ = m.RespondMsg(out)
		if s.cfg.OnQuery != nil {
			s.cfg.OnQuery(kind, time.Since(start), failed)
		}
	}
}

func (s *Server) get(r *request) (any, error) {
	family := strings.TrimPrefix(r.msg.Subject, s.cfg.Subjects.Prefix+".get.")
	fam, err := s.cfg.Families.Lookup(family)
	if err != nil {
		return nil, err
	}
	var req pipeline.GetRequest
	if err := r.decode(&req); err != nil {
		return nil, err
	}
	counts, err := s.counts(r.ctx, fam, req.IDs)
	if err != nil {
		return nil, err
	}
	return pipeline.GetReply{Fields: fam.Fields, Counts: counts}, nil
}

// counts gathers the counters of ids from their partitions, in parallel.
func (s *Server) counts(ctx context.Context, fam pipeline.Family, ids []pipeline.ID) ([][]uint64, error) {
	if len(ids) == 0 {
		return nil, fmt.Errorf("%w: ids is empty", pipeline.ErrBadRequest)
	}
	if len(ids) > pipeline.MaxQueryIDs {
		return nil, fmt.Errorf("%w: %d ids, at most %d per request", pipeline.ErrBadRequest, len(ids), pipeline.MaxQueryIDs)
	}
	owners := s.owners[fam.Name]
	if len(owners) != s.cfg.Partitions {
		return nil, fmt.Errorf("family %s is not served here", fam.Name)
	}
	nf := len(fam.Fields)
	flat := make([]uint64, len(ids)*nf)
	out := make([][]uint64, len(ids))
	type part struct {
		ids []uint64
		out [][]uint64
	}
	parts := map[int]*part{}
	for i, id := range ids {
		out[i] = flat[i*nf : (i+1)*nf : (i+1)*nf]
		p := pipeline.PartitionOf(id, s.cfg.Partitions)
		pp := parts[p]
		if pp == nil {
			pp = &part{}
			parts[p] = pp
		}
		pp.ids = append(pp.ids, uint64(id))
		pp.out = append(pp.out, out[i])
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for p, pp := range parts {
		wg.Go(func() {
			if err := owners[p].Get(ctx, pp.ids, pp.out); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

func (s *Server) liked(r *request) (any, error) {
	var req pipeline.LikedRequest
	if err := r.decode(&req); err != nil {
		return nil, err
	}
	if req.UID == 0 {
		return nil, fmt.Errorf("%w: uid is missing", pipeline.ErrBadRequest)
	}
	if len(req.Posts) == 0 || len(req.Posts) > pipeline.MaxQueryIDs {
		return nil, fmt.Errorf("%w: posts must hold 1 to %d ids, not %d", pipeline.ErrBadRequest, pipeline.MaxQueryIDs, len(req.Posts))
	}
	posts := make([]uint64, len(req.Posts))
	for i, p := range req.Posts {
		posts[i] = uint64(p)
	}
	liked, err := cold.Related(s.db, cold.Like, uint64(req.UID), posts)
	if err != nil {
		return nil, err
	}
	return pipeline.LikedReply{Liked: liked}, nil
}

// quotedID matches a JSON request that gave its uid or post as a string.
var quotedID = regexp.MustCompile(`"(uid|post)"\s*:\s*"`)

// list answers a newest-first page of one kind of relation, keyed by uid or post.
func (s *Server) list(k cold.Kind, bySubject bool, keyName string) func(*request) (any, error) {
	return func(r *request) (any, error) {
		var req pipeline.ListRequest
		if err := r.decode(&req); err != nil {
			return nil, err
		}
		id := req.UID
		if keyName == "post" {
			id = req.Post
		}
		if id == 0 {
			return nil, fmt.Errorf("%w: %s is missing", pipeline.ErrBadRequest, keyName)
		}
		if req.Limit == 0 {
			req.Limit = 20
		}
		if req.Limit < 0 || req.Limit > pipeline.MaxPage {
			return nil, fmt.Errorf("%w: limit %d out of range 1..%d", pipeline.ErrBadRequest, req.Limit, pipeline.MaxPage)
		}
		items, next, err := cold.List(s.db, k, bySubject, uint64(id), req.Limit, req.Before)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", pipeline.ErrBadRequest, err)
		}
		asString := r.asJSON && quotedID.Match(r.msg.Data)
		reply := pipeline.ListReply{IDs: make([]any, len(items)), TS: make([]int64, len(items)), Next: next}
		for i, it := range items {
			reply.IDs[i] = it.ID
			if asString {
				reply.IDs[i] = pipeline.ID(it.ID).String()
			}
			reply.TS[i] = it.TS
		}
		return reply, nil
	}
}

func (s *Server) unreadCounts(r *request) (any, error) {
	var req pipeline.UnreadRequest
	if err := r.decode(&req); err != nil {
		return nil, err
	}
	uids := req.UIDs
	single := req.UID != 0
	if single {
		if len(uids) > 0 {
			return nil, fmt.Errorf("%w: give uid or uids, not both", pipeline.ErrBadRequest)
		}
		uids = []pipeline.ID{req.UID}
	}
	counts, err := s.counts(r.ctx, s.unread, uids)
	if err != nil {
		return nil, err
	}
	idx := func(name string) int { i, _ := s.unread.Field(name); return i }
	ic, im, il, id, ifeed := idx("comment"), idx("mention"), idx("like"), idx("dm"), idx("feed")
	users := make([]pipeline.Unread, len(counts))
	err = s.db.Badger().View(func(txn *badger.Txn) error {
		for i, c := range counts {
			sys, feed, err := s.pulled(txn, uint64(uids[i]))
			if err != nil {
				return err
			}
			users[i] = pipeline.Unread{Comment: c[ic], Mention: c[im], Like: c[il], DM: c[id], System: sys, Feed: c[ifeed] + feed}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if single {
		return pipeline.UnreadReply{Unread: users[0]}, nil
	}
	return pipeline.UnreadReply{Users: users}, nil
}

// maxPulled bounds the pulled posts counted per followee ("a lot" needs no exact figure).
const maxPulled = 10_000

// pulled computes what a reader's counters do not hold: system notices since their last
// read, and posts of followees with too many followers to push to, since the later of
// the last feed read and the follow.
func (s *Server) pulled(txn *badger.Txn, uid uint64) (system, feed uint64, err error) {
	rs, err := cold.GetReader(txn, uid)
	if err != nil {
		return 0, 0, err
	}
	n, err := cold.SystemCount(txn, pipeline.PartitionOf(pipeline.ID(uid), s.cfg.Partitions))
	if err != nil {
		return 0, 0, err
	}
	if n > rs.SysSeen {
		system = n - rs.SysSeen
	}
	cold.Objects(txn, cold.Follow, uid, func(author uint64, followed int64) bool {
		if !s.cfg.Pulled.Has(author) {
			return true
		}
		var k uint64
		k, err = cold.CountPosts(txn, author, max(rs.FeedRead, followed), false, maxPulled)
		feed += k
		return err == nil
	})
	return system, feed, err
}

// health checks the event stages first and the counter partitions after them, so a
// delta published by a stage just before it was checked is seen by its counter's check.
func (s *Server) health(r *request) (any, error) { return s.Health(r.ctx) }

// Health reports whether every partition has applied all of its stream.
func (s *Server) Health(ctx context.Context) (*pipeline.HealthReply, error) {
	h := &pipeline.HealthReply{OK: true, Partitions: s.cfg.Partitions, Lagging: map[string]uint64{}}
	check := func(name string, l Lagger, ready bool) error {
		h.Checked++
		lag, err := l.Lag(ctx)
		if err != nil {
			return fmt.Errorf("cannot tell the lag of %s: %w", name, err)
		}
		if !ready && lag == 0 {
			lag = 1
		}
		if lag > 0 {
			h.OK = false
			h.Lagging[name] = lag
		}
		return nil
	}
	for name, st := range s.cfg.Stages {
		if err := check(name, st, true); err != nil {
			return nil, err
		}
	}
	for fam, ps := range s.owners {
		for p, o := range ps {
			if err := check(fmt.Sprintf("counter.%s.%d", fam, p), o, o.Ready()); err != nil {
				return nil, err
			}
		}
	}
	return h, nil
}
