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
// that ends at now.
func (s *Server) rank(ctx context.Context, family string, f uint8, minutes uint32, k int, now time.Time) ([]window.Ranked, error) {
	since := pipeline.WindowSince(now, minutes)
	owners := (*s.owners.Load())[family]
	if len(owners) != s.cfg.Partitions {
		return nil, fmt.Errorf("family %s is not served here", family)
	}
	lists := make([][]window.Ranked, s.cfg.Partitions)
	errs := make([]error, s.cfg.Partitions)
	// The partitions here that take a top without waiting are all asked first, then
	// waited for; the others each on a goroutine.
	var wg sync.WaitGroup
	waits := make([]func() ([]window.Ranked, error), len(owners))
	for p, o := range owners {
		switch t, ok := o.(TopSender); {
		case ok:
			waits[p] = t.SendTop(ctx, f, minutes, since, k)
		case o != nil:
			wg.Go(func() { lists[p], errs[p] = localTop(ctx, o, f, minutes, since, k) })
		default:
			wg.Go(func() { lists[p], errs[p] = s.remoteTop(ctx, family, p, f, minutes, since, k) })
		}
	}
	for p, wait := range waits {
		if wait != nil {
			lists[p], errs[p] = wait()
		}
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("%w: a top of %s needs every partition: %w", errUnavailable, family, err)
	}
	return window.Merge(k, lists...), nil
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
	parts := strings.Split(h, ",")
	bad := fmt.Errorf("%w: %s %q", pipeline.ErrBadRequest, topHeader, h)
	if len(parts) != 4 {
		return nil, bad
	}
	var v [4]uint64
	for i, bits := range []int{8, 32, 32, 16} {
		n, err := strconv.ParseUint(parts[i], 10, bits)
		if err != nil {
			return nil, bad
		}
		v[i] = n
	}
	if v[1] == 0 || v[3] == 0 {
		return nil, bad
	}
	ranked, err := localTop(r.ctx, o, uint8(v[0]), uint32(v[1]), uint32(v[2]), int(v[3]))
	if err != nil {
		return nil, err
	}
	return topReply(ranked), nil
}

// remoteTop asks the process owning partition p of family for its top.
func (s *Server) remoteTop(ctx context.Context, family string, p int, f uint8, minutes, since uint32, k int) ([]window.Ranked, error) {
	subj := s.cfg.Subjects.Part(family, p)
	hdr := fmt.Sprintf("%d,%d,%d,%d", f, minutes, since, k)
	msg, err := s.request(ctx, func() *nats.Msg {
		return &nats.Msg{Subject: subj, Header: nats.Header{topHeader: []string{hdr}}}
	}, nil) // windows are the owner's only
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
	ranked := make([]window.Ranked, len(reply.IDs))
	for i, id := range reply.IDs {
		ranked[i] = window.Ranked{ID: uint64(id), N: reply.Changes[i]}
	}
	return ranked, nil
}
