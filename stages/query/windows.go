package query

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/pipeline"
)

// Windowed is a partition that keeps windowed counts (stages/counter's worker).
type Windowed interface {
	// GetWindow fills out[i] with the net change of each field of ids[i] in the
	// minutes since, and after.
	GetWindow(ctx context.Context, ids []uint64, since uint32, out [][]int64) error
}

// WindowSender is a Windowed partition that takes a windowed get without waiting for its
// answer, as a Sender takes a get.
type WindowSender interface {
	SendWindow(ctx context.Context, ids []uint64, since uint32, out [][]int64) (wait func() error)
}

// sinceHeader carries, from the process a windowed get arrived at to the owners of its
// partitions, the first minute of the window: every partition answers for the same
// minutes, whatever its clock.
const sinceHeader = "Tally-Since"

// getWindow answers a get with a window: the net change of each counter in the window
// that ends at the minute of now.
func (s *Server) getWindow(ctx context.Context, fam pipeline.Family, req *pipeline.GetRequest) (any, error) {
	minutes, err := pipeline.ParseWindow(req.Window)
	if err != nil {
		return nil, err
	}
	since := pipeline.WindowSince(time.Now(), minutes)
	changes, unavailable, _, err := gather[int64](s, ctx, fam, req.IDs, &askWindow{hereWindow: hereWindow{ctx, fam.Name, since}, s: s, fam: fam, window: req.Window})
	if err != nil {
		return nil, err
	}
	return pipeline.GetReply{Fields: fam.Fields, Window: req.Window, Changes: changes, Unavailable: unavailable}, nil
}

// hereWindow asks the partitions registered here for the changes of a window since
// minute since; a partition not here is answered unavailable (another process's get of
// several partitions: peers.go).
type hereWindow struct {
	ctx    context.Context
	family string
	since  uint32
}

func (h *hereWindow) local(o Partition, ids []uint64, out [][]int64) error {
	return localWindow(h.ctx, o, ids, h.since, out)
}

func (h *hereWindow) send(o Partition, ids []uint64, out [][]int64) func() error {
	if sd, ok := o.(WindowSender); ok {
		return sd.SendWindow(h.ctx, ids, h.since, out)
	}
	return nil
}

func (h *hereWindow) remote(p int, _ []uint64, _ [][]int64) (*pipeline.Stale, error) {
	return nil, notHere(h.family, p)
}

// askWindow asks for the changes of fam in a window as a get does: the partitions here,
// then the owners of the others (each on its subject, or a process for several), never
// their standbys.
type askWindow struct {
	hereWindow
	s      *Server
	fam    pipeline.Family
	window string
}

func (a *askWindow) remote(p int, ids []uint64, out [][]int64) (*pipeline.Stale, error) {
	return nil, a.s.remoteWindow(a.ctx, a.fam, p, a.window, a.since, ids, out)
}

func (a *askWindow) peer(token string, ids []uint64, out [][]int64) ([]pipeline.ID, error) {
	return askPeer(a.s, a.ctx, a.fam, token, a.window, a.since, ids, out, changesOf)
}

func changesOf(r *pipeline.GetReply) [][]int64 { return r.Changes }

func localWindow(ctx context.Context, o Partition, ids []uint64, since uint32, out [][]int64) error {
	w, ok := o.(Windowed)
	if !ok {
		return fmt.Errorf("%w: this partition keeps no windows", pipeline.ErrBadRequest)
	}
	return w.GetWindow(ctx, ids, since, out)
}

// partWindow answers a windowed part request of another process, for the minutes its
// sinceHeader names.
func partWindow(r *request, fam pipeline.Family, o Partition, ids []uint64, req *pipeline.GetRequest) (any, error) {
	since, err := askedSince(r, req.Window)
	if err != nil {
		return nil, err
	}
	nf := len(fam.Fields)
	flat := make([]int64, len(ids)*nf)
	out := make([][]int64, len(ids))
	for i := range out {
		out[i] = flat[i*nf : (i+1)*nf : (i+1)*nf]
	}
	if err := localWindow(r.ctx, o, ids, since, out); err != nil {
		return nil, err
	}
	return pipeline.GetReply{Fields: fam.Fields, Window: req.Window, Changes: out}, nil
}

// askedSince is the first minute of the window another process asked for (sinceHeader),
// or of the window ending now when it did not say; a window not known is a bad request.
func askedSince(r *request, window string) (uint32, error) {
	minutes, err := pipeline.ParseWindow(window)
	if err != nil {
		return 0, err
	}
	h := r.msg.Header.Get(sinceHeader)
	if h == "" {
		return pipeline.WindowSince(time.Now(), minutes), nil
	}
	m, err := strconv.ParseUint(h, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("%w: %s %q", pipeline.ErrBadRequest, sinceHeader, h)
	}
	return uint32(m), nil
}

// remoteWindow asks the process owning partition p of fam for the window changes of ids
// since minute since.
func (s *Server) remoteWindow(ctx context.Context, fam pipeline.Family, p int, window string, since uint32, ids []uint64, out [][]int64) error {
	req := pipeline.GetRequest{IDs: make([]pipeline.ID, len(ids)), Window: window}
	for i, id := range ids {
		req.IDs[i] = pipeline.ID(id)
	}
	data, err := pipeline.Marshal(req, false)
	if err != nil {
		return err
	}
	subj := s.cfg.Subjects.Part(fam.Name, p)
	hdr := strconv.FormatUint(uint64(since), 10)
	msg, err := s.request(ctx, func() *nats.Msg {
		return &nats.Msg{Subject: subj, Data: data, Header: nats.Header{sinceHeader: []string{hdr}}}
	}, nil, partPatience) // windows are the owner's only: a windowed get is never answered stale
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("partition %s/%d is owned by no process (hand-over?)", fam.Name, p)
	case err != nil:
		return fmt.Errorf("partition %s/%d did not answer: %w", fam.Name, p, err)
	}
	var reply pipeline.GetReply
	if err := pipeline.UnmarshalReply(msg.Data, false, &reply); err != nil {
		return fmt.Errorf("partition %s/%d: cannot decode its reply: %w", fam.Name, p, err)
	}
	if reply.Error != "" {
		return fmt.Errorf("partition %s/%d answered: %s", fam.Name, p, reply.Error)
	}
	if reply.Window != window || !slices.Equal(reply.Fields, fam.Fields) || len(reply.Changes) != len(ids) {
		return fmt.Errorf("partition %s/%d answered window %q of %d ids with fields %v, want %q of %d with %v",
			fam.Name, p, reply.Window, len(reply.Changes), reply.Fields, window, len(ids), fam.Fields)
	}
	for i, c := range reply.Changes {
		if len(c) != len(out[i]) {
			return fmt.Errorf("partition %s/%d answered %d fields for id %d, want %d", fam.Name, p, len(c), ids[i], len(out[i]))
		}
		copy(out[i], c)
	}
	s.peers.learn(fam.Name, p, msg.Header.Get(peerHeader))
	return nil
}
