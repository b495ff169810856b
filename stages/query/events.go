package query

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/store/graph"
	"github.com/tally-dev/tally/store/stagelog"
	"github.com/tally-dev/tally/store/unread"
)

// Each event partition p is owned, stage and counters together, by one process, and its
// relation and unread state is only in that process's Badger. Every process serves every
// relation query: it reads a partition registered here (SetStage) from its own Badger
// and asks the owner of any other on <prefix>.part.ev.<p> (Subjects.PartEvents), with
// the query's kind in the queryHeader header and an evRequest body; the owner answers
// an evReply. One function per kind (evLocal) answers both, so a query reads the same
// whichever process receives it.

// Stage is an event partition's stage as the queries see it: its lag (health, audit
// settling), the authors whose posts its readers pull (unread), and whether its
// partition is certainly still this process's (its lease: a partition stopping here is
// served until its workers have stopped, and its lease may lapse meanwhile).
type Stage interface {
	Lagger
	Pulled() *unread.Pulled
	Owned() bool
	// Outbox tells how far the stage has published what it committed: the last outbox
	// entry a committed transaction wrote, and the oldest not yet known to be stored
	// (last+1 when every one is; see event.Stage.Outbox).
	Outbox() (last, oldest uint64)
}

// SetStage registers st as event partition p's stage in this process, or removes it when
// st is nil (an untyped nil). Like SetOwner, it is safe while queries run, and a
// registered partition is served to other processes on <prefix>.part.ev.<p> while the
// server is started (a removed one's subscription is released as SetOwner's are). It
// panics when p is out of range, as an index out of range would.
func (s *Server) SetStage(p int, st Stage) {
	if p < 0 || p >= s.cfg.Partitions {
		panic(fmt.Sprintf("query.SetStage: partition %d out of range 0..%d", p, s.cfg.Partitions-1))
	}
	s.mu.Lock()
	reg := slices.Clone(*s.stages.Load())
	reg[p] = st
	s.stages.Store(&reg)
	subscribed := false
	if s.started {
		sub, ok := s.evSubs[p]
		switch {
		case st != nil && !ok:
			if err := s.subscribeEvents(p); err != nil {
				s.log.Error("cannot serve an event partition to other processes", "partition", p, "err", err)
			} else {
				subscribed = true
			}
		case st == nil && ok:
			s.release(sub)
			delete(s.evSubs, p)
		}
	}
	s.mu.Unlock()
	if subscribed { // as in SetOwner: requests from now on reach the subscription
		if err := s.nc.FlushTimeout(s.cfg.Timeout); err != nil {
			s.log.Warn("cannot flush an event partition subscription", "partition", p, "err", err)
		}
	}
}

// stage returns event partition p's stage when it is registered here, else nil.
func (s *Server) stage(p int) Stage { return (*s.stages.Load())[p] }

// subscribeEvents serves a registered event partition to other processes; s.mu is held.
func (s *Server) subscribeEvents(p int) error {
	subj := s.cfg.Subjects.PartEvents(p)
	sub, err := s.nc.QueueSubscribe(subj, PartQueueGroup, s.handleOwned("part.ev", s.partEvents(p)))
	if err != nil {
		return fmt.Errorf("cannot subscribe %s: %w", subj, err)
	}
	s.evSubs[p] = sub
	return nil
}

func (s *Server) relationHandlers() map[string]func(*request) (any, error) {
	sj := s.cfg.Subjects
	return map[string]func(*request) (any, error){
		sj.Liked():     s.liked,
		sj.LikesUser(): s.list(graph.Like, true, "uid"),
		sj.LikesPost(): s.list(graph.Like, false, "post"),
		sj.Following(): s.list(graph.Follow, true, "uid"),
		sj.Followers(): s.list(graph.Follow, false, "uid"),
		sj.Unread():    s.unreadCounts,
		sj.Health():    s.health,
		sj.Audit():     s.audit,
	}
}

// subscribe serves each handler's subject as an endpoint of the query service, in
// QueueGroup (see micro.go).
func (s *Server) subscribe(handlers map[string]func(*request) (any, error)) error {
	return s.addEndpoints(handlers)
}

// queryHeader names the kind of a query forwarded to an event partition's owner.
const queryHeader = "Tally-Query"

// The kinds of forwarded queries.
const (
	evLiked   = "liked"   // ID liked each of IDs? (ID in p)
	evList    = "list"    // a page of ID's relations of Kind (ID in p, but for likes of a post)
	evUnread  = "unread"  // what the counters of IDs do not hold: pulled posts, notices (IDs in p)
	evRecount = "recount" // p's share of the relations of posts IDs and users Users
	evSample  = "sample"  // up to Limit ids of each kind with relations in p, for an audit
	evSettle  = "settle"  // has p's stage published what it had committed (see settle.go)?
	evHops    = "hops"    // the hop batches p has sent to each partition and applied of each (settle.go)
)

// quick are the kinds of queries a reader waits for, answered within a moment: those
// asked of a process for several partitions at once (see gather), within peerPatience.
// An audit's (recounts, samples) and a settle's may take longer.
var quick = map[string]bool{evLiked: true, evList: true, evUnread: true}

// evRequest is a query of one event partition; each kind reads the fields it names.
type evRequest struct {
	ID        uint64   `json:"id,omitempty"`
	IDs       []uint64 `json:"ids,omitempty"`
	Users     []uint64 `json:"users,omitempty"`
	Kind      byte     `json:"kind,omitempty"`
	BySubject bool     `json:"by_subject,omitempty"`
	Limit     int      `json:"limit,omitempty"`
	Before    string   `json:"before,omitempty"`
	// Last is, for a settle, the outbox entry to wait for, once HasLast (the first
	// settle of an audit asks the owner which one it is).
	Last    uint64 `json:"last,omitempty"`
	HasLast bool   `json:"has_last,omitempty"`
}

// evItem is one entry of a relation page, with its cursor, by which the pages of several
// partitions merge.
type evItem struct {
	ID     uint64 `json:"id"`
	TS     int64  `json:"ts"`
	Cursor string `json:"c"`
}

// evReply answers an evRequest; Error and Code are those of an errorReply.
type evReply struct {
	Liked []bool   `json:"liked,omitempty"`
	Items []evItem `json:"items,omitempty"`
	Next  string   `json:"next,omitempty"`
	// System and Feed are, per uid of an unread, the notices and pulled posts the
	// counters do not hold.
	System  []uint64       `json:"system,omitempty"`
	Feed    []uint64       `json:"feed,omitempty"`
	Recount *graph.Recount `json:"recount,omitempty"`
	// A sample: liked posts, followed users, users following.
	Posts     []uint64 `json:"posts,omitempty"`
	Followed  []uint64 `json:"followed,omitempty"`
	Following []uint64 `json:"following,omitempty"`
	Last      uint64   `json:"last,omitempty"`
	Done      bool     `json:"done,omitempty"`
	Error     string   `json:"error,omitempty"`
	Code      string   `json:"code,omitempty"`
	// Hops: the last hop batch sent to each partition, and applied, with every one
	// before it, of each (stagelog.Hops).
	Sent    map[uint32]uint64 `json:"sent,omitempty"`
	Applied map[uint32]uint64 `json:"applied,omitempty"`
}

// ev answers a query of event partition p: from this process's Badger when p is
// registered here, else from its owner over NATS. A partition owned by no process, or
// whose owner does not answer before ctx ends or within Config.Timeout (an audit's
// context is longer), is errUnavailable; an error of the owner keeps its code (and its
// text, so that a query fails alike whichever process got it).
func (s *Server) ev(ctx context.Context, p int, kind string, req *evRequest) (*evReply, error) {
	if st := s.stage(p); st != nil && st.Owned() { // else asked of its owner now
		return s.evLocal(ctx, p, st, kind, req)
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	data, err := pipeline.Marshal(req, false)
	if err != nil {
		return nil, err
	}
	m, err := s.request(ctx, func() *nats.Msg {
		msg := nats.NewMsg(s.cfg.Subjects.PartEvents(p))
		msg.Header.Set(queryHeader, kind)
		msg.Data = data
		return msg
	}, nil, 0) // the owner's only (a standby's event state answers nothing); an audit's recount may take long
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return nil, fmt.Errorf("%w: event partition %d is owned by no process (hand-over?)", errUnavailable, p)
	case err != nil:
		return nil, fmt.Errorf("%w: event partition %d did not answer: %w", errUnavailable, p, err)
	}
	var reply evReply
	if err := pipeline.UnmarshalReply(m.Data, false, &reply); err != nil {
		return nil, fmt.Errorf("event partition %d: cannot decode its reply: %w", p, err)
	}
	if reply.Error != "" {
		return nil, &remoteError{sentinel: pipeline.CodeError(reply.Code), msg: reply.Error}
	}
	s.peers.learn(evPeers, p, m.Header.Get(peerHeader))
	return &reply, nil
}

// remoteError is an error answered by another process: its text as it was, and the
// sentinel error of its code (nil for an internal error), for errors.Is and the reply's
// code.
type remoteError struct {
	sentinel error
	msg      string
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.sentinel }

// gather asks every event partition in ps in parallel — those of a process learned to
// serve several of them in one request (see peers.go), the others each as ev does; it
// returns the replies in the order of ps, or the first error in that order.
func (s *Server) gather(ctx context.Context, ps []int, kind string, req func(p int) *evRequest) ([]*evReply, error) {
	replies := make([]*evReply, len(ps))
	errs := make([]error, len(ps))
	var wg sync.WaitGroup
	one := func(i int) { replies[i], errs[i] = s.ev(ctx, ps[i], kind, req(ps[i])) }
	var groups []peerGroup // of indexes into ps
	for i, p := range ps {
		if st := s.stage(p); quick[kind] && (st == nil || !st.Owned()) {
			if token := s.peers.at(evPeers, p); token != "" {
				groups = addToGroup(groups, token, i)
				continue
			}
		}
		wg.Go(func() { one(i) })
	}
	for _, g := range groups {
		if len(g.parts) == 1 {
			wg.Go(func() { one(g.parts[0]) })
			continue
		}
		wg.Go(func() {
			got, err := s.evPeer(ctx, g.token, kind, ps, g.parts, req)
			for j, i := range g.parts {
				switch {
				case err != nil && ctx.Err() != nil:
					errs[i] = fmt.Errorf("%w: event partition %d did not answer: %w", errUnavailable, ps[i], err)
				case err != nil || got[j].Code == pipeline.CodeUnavailable: // not there now: asked on its subject
					wg.Go(func() { one(i) })
				case got[j].Error != "":
					errs[i] = &remoteError{sentinel: pipeline.CodeError(got[j].Code), msg: got[j].Error}
				default:
					replies[i] = got[j]
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return replies, nil
}

// allParts is 0..Partitions-1.
func (s *Server) allParts() []int {
	ps := make([]int, s.cfg.Partitions)
	for p := range ps {
		ps[p] = p
	}
	return ps
}

// partEvents answers <prefix>.part.ev.<p> from the stage registered here, for another
// process: a query of the kind in queryHeader, or its health (lagHeader).
func (s *Server) partEvents(p int) func(*request) (any, error) {
	return func(r *request) (any, error) {
		st := s.stage(p)
		if asked := r.msg.Header.Get(lagHeader); asked != "" {
			return s.stageHealth(r.ctx, p, st, asked)
		}
		if st == nil || !st.Owned() { // removed while this request was queued, or its lease lapsed as it stops
			return nil, fmt.Errorf("%w: event partition %d: %w", errUnavailable, p, errGone)
		}
		var req evRequest
		if err := r.decode(&req); err != nil {
			return nil, err
		}
		return s.evLocal(r.ctx, p, st, r.msg.Header.Get(queryHeader), &req)
	}
}

// inPart refuses ids of another partition than p: state of theirs is not in p.
func (s *Server) inPart(p int, ids ...uint64) error {
	for _, id := range ids {
		if q := pipeline.PartitionOf(pipeline.ID(id), s.cfg.Partitions); q != p {
			return fmt.Errorf("%w: id %d is in partition %d of %d, not %d", pipeline.ErrBadRequest, id, q, s.cfg.Partitions, p)
		}
	}
	return nil
}

// evLocal answers a query of event partition p, registered here with stage st, from
// this process's Badger.
func (s *Server) evLocal(ctx context.Context, p int, st Stage, kind string, req *evRequest) (*evReply, error) {
	switch kind {
	case evLiked:
		if err := s.inPart(p, req.ID); err != nil {
			return nil, err
		}
		liked, err := graph.Related(s.db, p, graph.Like, req.ID, req.IDs)
		return &evReply{Liked: liked}, err
	case evList:
		k := graph.Kind(req.Kind)
		if req.BySubject || k == graph.Follow { // likes of a post are in every partition
			if err := s.inPart(p, req.ID); err != nil {
				return nil, err
			}
		}
		if req.Limit < 1 || req.Limit > pipeline.MaxPage {
			return nil, fmt.Errorf("%w: limit %d out of range 1..%d", pipeline.ErrBadRequest, req.Limit, pipeline.MaxPage)
		}
		items, next, err := graph.List(s.db, p, k, req.BySubject, req.ID, req.Limit, req.Before)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", pipeline.ErrBadRequest, err)
		}
		reply := &evReply{Items: make([]evItem, len(items)), Next: next}
		for i, it := range items {
			reply.Items[i] = evItem{ID: it.ID, TS: it.TS, Cursor: it.Cursor()}
		}
		return reply, nil
	case evUnread:
		if err := s.inPart(p, req.IDs...); err != nil {
			return nil, err
		}
		return s.pulledOf(p, st.Pulled(), req.IDs)
	case evRecount:
		rc, err := graph.CountRelations(s.db, []int{p}, req.IDs, req.Users)
		if err != nil {
			return nil, fmt.Errorf("cannot recount the relations of partition %d: %w", p, err)
		}
		return &evReply{Recount: &rc}, nil
	case evSample:
		return s.sample(p, req.Limit)
	case evSettle:
		return s.stageSettled(ctx, p, st, req)
	case evHops:
		sent, applied, err := stagelog.Hops(s.db, p)
		if err != nil {
			return nil, fmt.Errorf("cannot read the hop marks of event partition %d: %w", p, err)
		}
		return &evReply{Sent: sent, Applied: applied}, nil
	}
	return nil, fmt.Errorf("%w: unknown query %q of an event partition", pipeline.ErrBadRequest, kind)
}

// stageName is an event stage's name in health and metrics.
func stageName(p int) string { return "event." + strconv.Itoa(p) }
