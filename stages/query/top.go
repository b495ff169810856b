package query

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/store/window"
)

// Topped is a partition that ranks its ids by their change over a window
// (stages/counter's worker, from its windowed counts).
type Topped interface {
	// Top ranks over the window of minutes that starts at minute since.
	Top(ctx context.Context, field uint8, minutes, since uint32, k int) ([]window.Ranked, error)
}

// TopSender is a Topped partition that takes a top without waiting for its answer, as
// a Sender takes a get.
type TopSender interface {
	SendTop(ctx context.Context, field uint8, minutes, since uint32, k int) (wait func() ([]window.Ranked, error))
}

// topHeader asks the owner of a partition (its part subject) for its top instead of
// counts: "<field index>,<window minutes>,<first minute>,<k>", the first minute fixed
// where the request arrived, so that every partition ranks the same minutes.
const topHeader = "Tally-Top"

// top answers tally.top.<family>: every partition's top k merged, exact. A top needs
// every partition — an id missing from it would be a wrong list, not a shorter one — so
// a partition that cannot answer makes the reply unavailable.
func (s *Server) top(r *request) (any, error) {
	family := strings.TrimPrefix(r.msg.Subject, s.cfg.Subjects.Prefix+".top.")
	fam, err := s.cfg.Families.Lookup(family)
	if err != nil {
		return nil, err
	}
	var req pipeline.TopRequest
	if err := r.decode(&req); err != nil {
		return nil, err
	}
	f, err := fam.Field(req.Field)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", pipeline.ErrBadRequest, err)
	}
	if slices.Contains(fam.Estimated(), req.Field) {
		return nil, fmt.Errorf("%w: %s is set, not added: it has no window to rank by", pipeline.ErrBadRequest, req.Field)
	}
	minutes, err := pipeline.ParseWindow(req.Window)
	if err != nil {
		return nil, err
	}
	k := cmp.Or(req.Limit, pipeline.DefaultTop)
	if k < 1 || k > pipeline.MaxTop {
		return nil, fmt.Errorf("%w: limit %d, want 1 to %d", pipeline.ErrBadRequest, req.Limit, pipeline.MaxTop)
	}
	ranked, err := s.rank(r.ctx, fam.Name, uint8(f), minutes, k, time.Now())
	if err != nil {
		return nil, err
	}
	if req.Watch {
		w := topWatch{family: fam.Name, field: req.Field, window: req.Window, f: uint8(f), minutes: minutes, k: k, asJSON: r.asJSON}
		if err := s.watches.watch(w, ranked, time.Now(), s.cfg.TopWatchFor); err != nil {
			return nil, err
		}
	}
	reply := topReply(ranked)
	reply.Field, reply.Window = req.Field, req.Window
	return reply, nil
}

// rank merges every partition's top k of field f of family over the window of minutes
// that ends at now: the partitions here, the others of their owners — a process learned
// to serve several asked once for their top (see peers.go), each other partition on its
// own subject.
func (s *Server) rank(ctx context.Context, family string, f uint8, minutes uint32, k int, now time.Time) ([]window.Ranked, error) {
	since := pipeline.WindowSince(now, minutes)
	owners := (*s.owners.Load())[family]
	if len(owners) != s.cfg.Partitions {
		return nil, fmt.Errorf("family %s is not served here", family)
	}
	var here []int
	var groups []peerGroup
	for p, o := range owners {
		if o != nil {
			here = append(here, p)
		} else if token := s.peers.at(family, p); token != "" {
			groups = addToGroup(groups, token, p)
		} else {
			groups = append(groups, peerGroup{parts: []int{p}})
		}
	}
	// Each list and error by partition, and one more for each group asked of a process.
	lists := make([][]window.Ranked, s.cfg.Partitions+len(groups))
	errs := make([]error, len(lists))
	remotely := func(p int) { lists[p], errs[p] = s.remoteTop(ctx, family, p, f, minutes, since, k) }
	var wg sync.WaitGroup
	for i, g := range groups {
		if len(g.parts) == 1 {
			wg.Go(func() { remotely(g.parts[0]) })
			continue
		}
		wg.Go(func() {
			ranked, missing, err := s.peerTop(ctx, family, g.token, g.parts, f, minutes, since, k)
			switch {
			case err != nil && ctx.Err() != nil:
				errs[s.cfg.Partitions+i] = err
				return
			case err != nil:
				missing = g.parts
			default:
				lists[s.cfg.Partitions+i] = ranked
			}
			for _, p := range missing {
				wg.Go(func() { remotely(p) })
			}
		})
	}
	for p, err := range s.topsHere(ctx, owners, here, f, minutes, since, k, lists) {
		if errors.Is(err, errUnavailable) { // stopped here: a hand-over
			wg.Go(func() { remotely(p) })
		} else {
			errs[p] = err
		}
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("%w: a top of %s needs every partition: %w", errUnavailable, family, err)
	}
	return window.Merge(k, lists...), nil
}

// topsHere ranks the partitions ps of owners, all registered here, into lists (by
// partition): those that take a top without waiting are all asked first, then waited
// for, the others in turn. It returns the error of each partition that failed.
func (s *Server) topsHere(ctx context.Context, owners []Partition, ps []int, f uint8, minutes, since uint32, k int, lists [][]window.Ranked) map[int]error {
	waits := make([]func() ([]window.Ranked, error), len(ps))
	for i, p := range ps {
		if t, ok := owners[p].(TopSender); ok {
			waits[i] = t.SendTop(ctx, f, minutes, since, k)
		}
	}
	var errs map[int]error
	for i, p := range ps {
		var err error
		if waits[i] != nil {
			lists[p], err = waits[i]()
		} else {
			lists[p], err = localTop(ctx, owners[p], f, minutes, since, k)
		}
		if err != nil {
			if errs == nil {
				errs = map[int]error{}
			}
			errs[p], lists[p] = err, nil
		}
	}
	return errs
}

// topReply is the reply listing ranked.
func topReply(ranked []window.Ranked) pipeline.TopReply {
	reply := pipeline.TopReply{IDs: make([]pipeline.ID, len(ranked)), Changes: make([]int64, len(ranked))}
	for i, r := range ranked {
		reply.IDs[i], reply.Changes[i] = pipeline.ID(r.ID), r.N
	}
	return reply
}

func localTop(ctx context.Context, o Partition, f uint8, minutes, since uint32, k int) ([]window.Ranked, error) {
	t, ok := o.(Topped)
	if !ok {
		return nil, fmt.Errorf("%w: this partition keeps no windows", pipeline.ErrBadRequest)
	}
	return t.Top(ctx, f, minutes, since, k)
}

// partTop answers another process's request for this partition's top (topHeader h).
func partTop(r *request, o Partition, h string) (any, error) {
	f, minutes, since, k, err := parseTop(h)
	if err != nil {
		return nil, err
	}
	ranked, err := localTop(r.ctx, o, f, minutes, since, k)
	if err != nil {
		return nil, err
	}
	return topReply(ranked), nil
}

// parseTop reads a topHeader: the field's index, the window's minutes, its first minute
// and k.
func parseTop(h string) (f uint8, minutes, since uint32, k int, err error) {
	parts := strings.Split(h, ",")
	bad := fmt.Errorf("%w: %s %q", pipeline.ErrBadRequest, topHeader, h)
	if len(parts) != 4 {
		return 0, 0, 0, 0, bad
	}
	var v [4]uint64
	for i, bits := range []int{8, 32, 32, 16} {
		n, err := strconv.ParseUint(parts[i], 10, bits)
		if err != nil {
			return 0, 0, 0, 0, bad
		}
		v[i] = n
	}
	if v[1] == 0 || v[3] == 0 {
		return 0, 0, 0, 0, bad
	}
	return uint8(v[0]), uint32(v[1]), uint32(v[2]), int(v[3]), nil
}

// topAsked is the topHeader of a top of field f over the window of minutes from minute
// since, k long.
func topAsked(f uint8, minutes, since uint32, k int) string {
	return fmt.Sprintf("%d,%d,%d,%d", f, minutes, since, k)
}

// remoteTop asks the process owning partition p of family for its top.
func (s *Server) remoteTop(ctx context.Context, family string, p int, f uint8, minutes, since uint32, k int) ([]window.Ranked, error) {
	subj := s.cfg.Subjects.Part(family, p)
	hdr := topAsked(f, minutes, since, k)
	msg, err := s.request(ctx, func() *nats.Msg {
		return &nats.Msg{Subject: subj, Header: nats.Header{topHeader: []string{hdr}}}
	}, nil, partPatience) // windows are the owner's only
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return nil, fmt.Errorf("partition %s/%d is owned by no process (hand-over?)", family, p)
	case err != nil:
		return nil, fmt.Errorf("partition %s/%d did not answer: %w", family, p, err)
	}
	var reply pipeline.TopReply
	if err := pipeline.UnmarshalReply(msg.Data, false, &reply); err != nil {
		return nil, fmt.Errorf("partition %s/%d: cannot decode its reply: %w", family, p, err)
	}
	if reply.Error != "" {
		return nil, fmt.Errorf("partition %s/%d answered: %s", family, p, reply.Error)
	}
	if len(reply.Changes) != len(reply.IDs) || len(reply.IDs) > k {
		return nil, fmt.Errorf("partition %s/%d answered %d ids and %d changes for a top %d", family, p, len(reply.IDs), len(reply.Changes), k)
	}
	s.peers.learn(family, p, msg.Header.Get(peerHeader))
	return rankedOf(reply.IDs, reply.Changes), nil
}

// rankedOf is the list a top reply's ids and changes give.
func rankedOf(ids []pipeline.ID, changes []int64) []window.Ranked {
	ranked := make([]window.Ranked, len(ids))
	for i, id := range ids {
		ranked[i] = window.Ranked{ID: uint64(id), N: changes[i]}
	}
	return ranked
}
