package query

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/store/window"
)

// A watched top (TopRequest.Watch) is pushed rather than asked for again: the server
// that answered the watch ranks it again every TopEvery — a merge of the partitions'
// tops, which they keep ranked at each flush tick (stages/counter's top.go) — and
// publishes it on Subjects.TopChanges whenever it changed, for TopWatchFor after the
// last watch request. What it publishes is the whole top, never a difference, so a
// watcher that missed a message (core NATS delivers at most once) is whole again at the
// next one; a watcher asks again within TopWatchFor, which also answers the top as of
// then. Any number of watchers of one top cost one ranking per tick; several processes
// may publish the same top for a while (watch requests go to any of them): each message
// is the top as some process ranked it, and a watcher drops one equal to the last.

// topWatch is one top watched: what it ranks and in which encoding it is published.
type topWatch struct {
	family, field, window string
	f                     uint8
	minutes               uint32
	k                     int
	asJSON                bool
}

type watchState struct {
	until time.Time
	last  []window.Ranked // as last published (or answered)
}

// watches are the tops watched through this server. Safe for concurrent use.
type watches struct {
	mu sync.Mutex
	m  map[topWatch]*watchState
}

// maxWatched bounds the tops one server ranks at every tick for watchers: a watch of
// one more is refused (every watcher of a top already watched is served).
const maxWatched = 256

// watch makes w watched for watchFor after now; ranked is the top as just answered to
// the watcher, which is not published again until it changes. It refuses a new top past
// maxWatched.
func (ws *watches) watch(w topWatch, ranked []window.Ranked, now time.Time, watchFor time.Duration) error {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.m == nil {
		ws.m = map[topWatch]*watchState{}
	}
	st := ws.m[w]
	if st == nil {
		if len(ws.m) >= maxWatched {
			return fmt.Errorf("%w: %d tops are watched through this tallyd, the most it ranks at every flush; watch one of them (the same field, window and limit)", errUnavailable, maxWatched)
		}
		st = &watchState{last: ranked}
		ws.m[w] = st
	}
	st.until = now.Add(watchFor)
	return nil
}

// live returns the tops watched at now, forgetting those whose time is up.
func (ws *watches) live(now time.Time) []topWatch {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	out := make([]topWatch, 0, len(ws.m))
	for w, st := range ws.m {
		if now.After(st.until) {
			delete(ws.m, w)
			continue
		}
		out = append(out, w)
	}
	return out
}

// changed records ranked as w's top and reports whether it differs from the last one
// (false when w is no longer watched).
func (ws *watches) changed(w topWatch, ranked []window.Ranked) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	st := ws.m[w]
	if st == nil || slices.Equal(st.last, ranked) {
		return false
	}
	st.last = ranked
	return true
}

// publishWatched ranks every top watched every TopEvery and publishes those that
// changed, until stop is closed; then it closes done.
func (s *Server) publishWatched(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-stop; cancel() }() // a ranking waiting for a partition ends with a stop
	t := time.NewTicker(s.cfg.TopEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			for _, w := range s.watches.live(now) {
				if ctx.Err() != nil {
					return
				}
				s.publishTop(ctx, w, now)
			}
		}
	}
}

// publishTop ranks w at now and publishes it if it changed. A top that cannot be ranked
// (a partition being handed over) is not published: the watcher's next watch request
// gets the error.
func (s *Server) publishTop(ctx context.Context, w topWatch, now time.Time) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	ranked, err := s.rank(ctx, w.family, w.f, w.minutes, w.k, now)
	if err != nil || !s.watches.changed(w, ranked) {
		return
	}
	reply := topReply(ranked)
	reply.Field, reply.Window = w.field, w.window
	data, err := pipeline.Marshal(reply, w.asJSON)
	if err != nil {
		s.log.Warn("cannot encode a watched top", "family", w.family, "err", err)
		return
	}
	msg := &nats.Msg{Subject: s.cfg.Subjects.TopChanges(w.family, w.field, w.window, w.k), Data: data}
	if w.asJSON {
		msg.Header = nats.Header{"Content-Type": []string{pipeline.ContentTypeJSON}}
	}
	if err := s.nc.PublishMsg(msg); err != nil {
		s.log.Warn("cannot publish a watched top", "family", w.family, "err", err)
	}
}
