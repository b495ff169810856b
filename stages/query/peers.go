package query

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/store/window"
)

// A get whose ids fall in partitions of other processes asks each partition's owner on
// the partition's own subject (remote): half of a 20-id get's partitions in another
// process cost six requests, 2.5× the CPU of a get answered in one process
// (BenchmarkGet20/tally-recent-two). So a process learns which process answered each
// partition — an owner's reply names its peer token (peerHeader) — and asks a process it
// has learned serves two or more of a get's partitions for all of their ids in one
// request (<prefix>.part.<family>.peer.<token>). That process answers them from the
// partitions registered with it only, as it answers a partition's subject, and answers
// unavailable the ids of any partition it does not serve now (a hand-over): the asker
// asks those on their partitions' subjects as before, and forgets what it had learned of
// them. What is learned is only ever a shortcut: a process gone (no responders on its
// token), silent (peerPatience) or refusing sends every partition asked of it back to its
// own subject, so a read follows a hand-over by the same rules as ever (request: waits
// out a hand-over, the standby unless exact). Measured: the get of two tallyd 31 % less
// CPU, 40 % less latency (docs/performance.md).

// peerPatience bounds how long a get waits for a process asked for several partitions
// (a healthy one answers within a millisecond or so): one that does not answer is
// forgotten and its partitions asked on their own subjects, within what is left of the
// get's time. A process paused (a long GC pause, a frozen VM) keeps its subscriptions on
// the NATS server until the server gives its connection up, minutes later, and the
// partitions it owned may have another owner by then; a partition's subject, shared in
// a queue group, may reach that owner, a process's subject never would.
const peerPatience = 250 * time.Millisecond

// peerQuiet is how long a process that did not answer within peerPatience is not asked
// for several partitions again, though its replies on partitions' subjects name it.
const peerQuiet = 30 * time.Second

// peerHeader names, in an owner's reply on a partition's subject, the token of its peer
// subject (Subjects.Peer).
const peerHeader = "Tally-Peer"

// peers is what this process has learned of where the partitions of each family are
// served: the peer token of the process that last answered each.
type peers struct {
	token string                              // this process's own: a NUID, new each start of the process
	of    map[string][]atomic.Pointer[string] // family → partition → token (nil: not known)
	// silent holds the tokens of processes that did not answer within peerPatience, each
	// until when it is not learned again (peerQuiet).
	silent pipeline.Silences
}

// evPeers is the event partitions' name among peers.of (Subjects.PartEvents: "ev").
const evPeers = "ev"

func newPeers(fams pipeline.Families, n int) *peers {
	ps := &peers{token: nuid.Next(), of: make(map[string][]atomic.Pointer[string], len(fams)+1)}
	for _, f := range fams {
		ps.of[f.Name] = make([]atomic.Pointer[string], n)
	}
	ps.of[evPeers] = make([]atomic.Pointer[string], n)
	return ps
}

// at is the token of the process that serves partition p of family, as last learned
// ("" when not known).
func (ps *peers) at(family string, p int) string {
	if t := ps.of[family][p].Load(); t != nil {
		return *t
	}
	return ""
}

// learn records that the process of token answered partition p of family. A token that is
// not one subject token (an older or a foreign process's header) is not learned.
func (ps *peers) learn(family string, p int, token string) {
	if !pipeline.ValidToken(token) || token == ps.token {
		return
	}
	if ps.silent.Quiet(token) {
		return
	}
	slot := &ps.of[family][p]
	if t := slot.Load(); t == nil || *t != token {
		slot.Store(&token)
	}
}

// forget drops what was learned of partition p of family, if it is still token.
func (ps *peers) forget(family string, p int, token string) {
	slot := &ps.of[family][p]
	if t := slot.Load(); t != nil && *t == token {
		slot.CompareAndSwap(t, nil)
	}
}

// hush forgets the process of token, which did not answer, and does not learn it again
// for peerQuiet: its partitions' owners answer on their subjects meanwhile, and it
// again (a paused process resumed) then. The silences past are dropped.
func (ps *peers) hush(token string) {
	ps.silent.Hush(token, peerQuiet)
	ps.forgetAll(token)
}

// forgetAll drops every partition learned to be served by the process of token: it
// answers no more (stopped, or killed).
func (ps *peers) forgetAll(token string) {
	for family, slots := range ps.of {
		for p := range slots {
			ps.forget(family, p, token)
		}
	}
}

// askProcess sends m, a request for several partitions, to the process of token, within
// peerPatience: one that has gone (no responders) is forgotten, one that does not answer
// in time is hushed (see peers).
func (s *Server) askProcess(ctx context.Context, token string, m *nats.Msg) (*nats.Msg, error) {
	pctx, cancel := context.WithTimeout(ctx, peerPatience)
	defer cancel()
	msg, err := s.nc.RequestMsgWithContext(pctx, m)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		s.peers.forgetAll(token) // gone
	case err != nil && ctx.Err() == nil:
		s.peers.hush(token) // paused, or hung: its partitions' subjects may reach their owners
	}
	return msg, err
}

// askPeer asks the process of token for the rows of ids (counts, or the changes of
// window since minute since), which lie in two or more partitions of fam that it was
// learned to serve (see the top of this file), and copies them into out; rows reads them
// from its reply. It returns the ids that process did not answer (partitions it does not
// serve now), or an error when it answered nothing: the asker then asks every partition
// on its own subject.
func askPeer[T uint64 | int64](s *Server, ctx context.Context, fam pipeline.Family, token, window string, since uint32, ids []uint64, out [][]T,
	rows func(*pipeline.GetReply) [][]T) (missing []pipeline.ID, err error) {
	req := pipeline.GetRequest{IDs: make([]pipeline.ID, len(ids)), Window: window}
	for i, id := range ids {
		req.IDs[i] = pipeline.ID(id)
	}
	data, err := pipeline.Marshal(req, false)
	if err != nil {
		return nil, err
	}
	m := &nats.Msg{Subject: s.cfg.Subjects.Peer(fam.Name, token), Data: data}
	if window != "" {
		m.Header = nats.Header{sinceHeader: []string{strconv.FormatUint(uint64(since), 10)}}
	}
	msg, err := s.askProcess(ctx, token, m)
	if err != nil {
		return nil, fmt.Errorf("the process serving partitions of %s (%s) did not answer: %w", fam.Name, token, err)
	}
	var reply pipeline.GetReply
	if err := pipeline.UnmarshalReply(msg.Data, false, &reply); err != nil {
		return nil, fmt.Errorf("the process serving partitions of %s (%s): cannot decode its reply: %w", fam.Name, token, err)
	}
	if reply.Error != "" {
		return nil, fmt.Errorf("the process serving partitions of %s (%s) answered: %s", fam.Name, token, reply.Error)
	}
	got := rows(&reply)
	if reply.Window != window || !slices.Equal(reply.Fields, fam.Fields) || len(got) != len(ids) || len(reply.Stale) > 0 {
		return nil, fmt.Errorf("the process serving partitions of %s (%s) answered window %q of %d ids with fields %v, want %q of %d with %v",
			fam.Name, token, reply.Window, len(got), reply.Fields, window, len(ids), fam.Fields)
	}
	for i, c := range got {
		if c != nil && len(c) != len(out[i]) {
			return nil, fmt.Errorf("the process serving partitions of %s (%s) answered %d fields for id %d, want %d", fam.Name, token, len(c), ids[i], len(out[i]))
		}
	}
	for i, c := range got {
		if c == nil { // unavailable there: asked on its partition's subject
			missing = append(missing, pipeline.ID(ids[i]))
			s.peers.forget(fam.Name, pipeline.PartitionOf(pipeline.ID(ids[i]), s.cfg.Partitions), token)
			continue
		}
		copy(out[i], c)
	}
	return missing, nil
}

// partsHeader lists, in a request for a top of several partitions on a process's peer
// subject, the partitions asked: "<p>,<p>,…".
const partsHeader = "Tally-Parts"

// peerTopReply is a process's top of several of its partitions, merged, and the
// partitions it did not rank (not served there now).
type peerTopReply struct {
	IDs     []pipeline.ID `json:"ids,omitempty"`
	Changes []int64       `json:"changes,omitempty"`
	Missing []int         `json:"missing,omitempty"`
	Error   string        `json:"error,omitempty"`
}

// peerTop asks the process of token for the top of partitions ps of family, which it was
// learned to serve, merged into one list: a top merged of every partition's is exact, and
// so is one merged of merged ones. It returns the partitions that process did not rank,
// or an error when it answered nothing (every partition is then asked on its subject).
func (s *Server) peerTop(ctx context.Context, family, token string, ps []int, f uint8, minutes, since uint32, k int) (ranked []window.Ranked, missing []int, err error) {
	list := make([]byte, 0, 4*len(ps))
	for i, p := range ps {
		if i > 0 {
			list = append(list, ',')
		}
		list = strconv.AppendInt(list, int64(p), 10)
	}
	msg, err := s.askProcess(ctx, token, &nats.Msg{Subject: s.cfg.Subjects.Peer(family, token),
		Header: nats.Header{topHeader: []string{topAsked(f, minutes, since, k)}, partsHeader: []string{string(list)}}})
	if err != nil {
		return nil, nil, fmt.Errorf("the process serving partitions of %s (%s) did not answer: %w", family, token, err)
	}
	var reply peerTopReply
	if err := pipeline.UnmarshalReply(msg.Data, false, &reply); err != nil {
		return nil, nil, fmt.Errorf("the process serving partitions of %s (%s): cannot decode its reply: %w", family, token, err)
	}
	if reply.Error != "" {
		return nil, nil, fmt.Errorf("the process serving partitions of %s (%s) answered: %s", family, token, reply.Error)
	}
	if len(reply.Changes) != len(reply.IDs) || len(reply.IDs) > k || slices.ContainsFunc(reply.Missing, func(p int) bool { return !slices.Contains(ps, p) }) {
		return nil, nil, fmt.Errorf("the process serving partitions of %s (%s) answered %d ids and %d changes for a top %d, missing %v of %v",
			family, token, len(reply.IDs), len(reply.Changes), k, reply.Missing, ps)
	}
	for _, p := range reply.Missing {
		s.peers.forget(family, p, token)
	}
	return rankedOf(reply.IDs, reply.Changes), reply.Missing, nil
}

// topHere answers another process's request for the top of several partitions it
// learned are here (topHeader h, partsHeader): those registered here ranked and merged,
// the others (handed over) listed as missing, never asked of another process.
func (s *Server) topHere(r *request, fam pipeline.Family, h string) (any, error) {
	f, minutes, since, k, err := parseTop(h)
	if err != nil {
		return nil, err
	}
	var ps []int
	for p := range strings.SplitSeq(r.msg.Header.Get(partsHeader), ",") {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || n >= s.cfg.Partitions || slices.Contains(ps, n) {
			return nil, fmt.Errorf("%w: %s %q", pipeline.ErrBadRequest, partsHeader, r.msg.Header.Get(partsHeader))
		}
		ps = append(ps, n)
	}
	owners := (*s.owners.Load())[fam.Name]
	var here, missing []int
	for _, p := range ps {
		if owners[p] != nil {
			here = append(here, p)
		} else {
			missing = append(missing, p)
		}
	}
	lists := make([][]window.Ranked, s.cfg.Partitions)
	for p := range s.topsHere(r.ctx, owners, here, f, minutes, since, k, lists) {
		missing = append(missing, p) // the asker asks it on its subject, and hears why
	}
	reply := peerTopReply{Missing: missing}
	for _, rk := range window.Merge(k, lists...) {
		reply.IDs, reply.Changes = append(reply.IDs, pipeline.ID(rk.ID)), append(reply.Changes, rk.N)
	}
	return reply, nil
}

// evPeerRequest asks a process for queries of several event partitions (the kind in
// queryHeader), and evPeerReply answers each in turn: a partition not served there is
// answered with the code unavailable, which the asker asks on its subject.
type evPeerRequest struct {
	Parts []evPeerPart `json:"parts"`
}

type evPeerPart struct {
	P   int        `json:"p"`
	Req *evRequest `json:"req"`
}

type evPeerReply struct {
	Replies []*evReply `json:"replies,omitempty"`
	Error   string     `json:"error,omitempty"`
}

// evPeer asks the process of token, learned to serve event partitions ps[i] of each i
// in at, for the query kind of each (req), in one request; it returns their replies in
// the order of at (a failed one with its Error and Code), or an error when that process
// answered nothing.
func (s *Server) evPeer(ctx context.Context, token, kind string, ps, at []int, req func(p int) *evRequest) ([]*evReply, error) {
	ask := evPeerRequest{Parts: make([]evPeerPart, len(at))}
	for j, i := range at {
		ask.Parts[j] = evPeerPart{P: ps[i], Req: req(ps[i])}
	}
	data, err := pipeline.Marshal(ask, false)
	if err != nil {
		return nil, err
	}
	m := nats.NewMsg(s.cfg.Subjects.Peer(evPeers, token))
	m.Header.Set(queryHeader, kind)
	m.Data = data
	msg, err := s.askProcess(ctx, token, m)
	if err != nil {
		return nil, fmt.Errorf("the process serving event partitions (%s) did not answer: %w", token, err)
	}
	var reply evPeerReply
	if err := pipeline.UnmarshalReply(msg.Data, false, &reply); err != nil {
		return nil, fmt.Errorf("the process serving event partitions (%s): cannot decode its reply: %w", token, err)
	}
	if reply.Error != "" || len(reply.Replies) != len(at) || slices.Contains(reply.Replies, nil) {
		return nil, fmt.Errorf("the process serving event partitions (%s) answered %d of %d partitions: %s", token, len(reply.Replies), len(at), reply.Error)
	}
	for j, r := range reply.Replies {
		if r.Code == pipeline.CodeUnavailable {
			s.peers.forget(evPeers, ps[at[j]], token)
		}
	}
	return reply.Replies, nil
}

// evHere answers another process's queries of several event partitions it learned are
// here (evPeerRequest), each from the stage registered here, or unavailable when none
// is (handed over): never asked of another process.
func (s *Server) evHere(r *request) (any, error) {
	var req evPeerRequest
	if err := r.decode(&req); err != nil {
		return nil, err
	}
	if len(req.Parts) == 0 || len(req.Parts) > s.cfg.Partitions {
		return nil, fmt.Errorf("%w: %d event partitions asked, want 1 to %d", pipeline.ErrBadRequest, len(req.Parts), s.cfg.Partitions)
	}
	kind := r.msg.Header.Get(queryHeader)
	reply := evPeerReply{Replies: make([]*evReply, len(req.Parts))}
	var wg sync.WaitGroup
	for j, pp := range req.Parts {
		wg.Go(func() {
			var got *evReply
			var err error
			switch st := s.stage(max(pp.P, 0) % s.cfg.Partitions); {
			case pp.P < 0 || pp.P >= s.cfg.Partitions || pp.Req == nil:
				err = fmt.Errorf("%w: event partition %d of %d", pipeline.ErrBadRequest, pp.P, s.cfg.Partitions)
			case st == nil || !st.Owned():
				err = fmt.Errorf("%w: event partition %d is not served here", errUnavailable, pp.P)
			default:
				got, err = s.evLocal(r.ctx, pp.P, st, kind, pp.Req)
			}
			if err != nil {
				got = &evReply{Error: err.Error(), Code: pipeline.ErrorCode(err)}
			}
			reply.Replies[j] = got
		})
	}
	wg.Wait()
	return reply, nil
}

// handlePeer takes another process's get of the partitions it learned are here
// (Subjects.Peers) and hands it to an answerer (handOver).
func (s *Server) handlePeer(m *nats.Msg) {
	s.handOver(&job{kind: "peer", h: s.peerGet, m: m, peer: true})
}

// peerGet answers another process's get of ids in partitions it learned are here: from
// the partitions registered here only; the ids of a partition not here, or unavailable
// here (handed over), are answered unavailable, never asked of another process. Never
// stale, as a partition's subject is never.
func (s *Server) peerGet(r *request) (any, error) {
	family, _, _ := strings.Cut(strings.TrimPrefix(r.msg.Subject, s.cfg.Subjects.Prefix+".part."), ".")
	if family == evPeers {
		return s.evHere(r)
	}
	fam, err := s.cfg.Families.Lookup(family)
	if err != nil {
		return nil, err
	}
	if h := r.msg.Header.Get(topHeader); h != "" {
		return s.topHere(r, fam, h)
	}
	var req pipeline.GetRequest
	if err := r.decode(&req); err != nil {
		return nil, err
	}
	if req.Window != "" {
		since, err := askedSince(r, req.Window)
		if err != nil {
			return nil, err
		}
		changes, unavailable, _, err := gather[int64](s, r.ctx, fam, req.IDs, &hereWindow{r.ctx, fam.Name, since})
		if err != nil {
			return nil, err
		}
		return pipeline.GetReply{Fields: fam.Fields, Window: req.Window, Changes: changes, Unavailable: unavailable}, nil
	}
	counts, unavailable, _, err := gather[uint64](s, r.ctx, fam, req.IDs, &hereCounts{r.ctx, fam.Name})
	if err != nil {
		return nil, err
	}
	return pipeline.GetReply{Fields: fam.Fields, Estimated: fam.Estimated(), Counts: counts, Unavailable: unavailable}, nil
}

// notHere answers a partition asked of this process by another that is not served here.
func notHere(family string, p int) error {
	return fmt.Errorf("%w: partition %s/%d is not served here", errUnavailable, family, p)
}
