package query

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/store/cold"
)

// events is what the queries that read relations need: the event stages own the
// relations, and only the process that owns them has them all.
type events struct {
	stages map[string]Lagger
	pulled *cold.Pulled
}

// lagHeader on a request to a partition's subject asks for its health instead of counts.
const lagHeader = "Tally-Health"

// health answers for the whole prefix: this process's event stages and counter
// partitions, and every other counter partition asked of its owner; a partition that no
// process owns (in hand-over) is lagging. The event stages are checked first, so a delta
// published by a stage just before it was checked is seen by its counter's check. Only
// the owner of the event stages answers health, since only it can tell their lag.
func (s *Server) health(r *request) (any, error) {
	h, err := s.Health(r.ctx)
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
	for fam, ps := range *s.owners.Load() {
		for p, o := range ps {
			if o != nil {
				continue
			}
			a := &remote{name: counterName(fam, p)}
			asks = append(asks, a)
			wg.Go(func() {
				msg := nats.NewMsg(s.cfg.Subjects.Part(fam, p))
				msg.Header.Set(lagHeader, "1")
				m, err := s.nc.RequestMsgWithContext(r.ctx, msg)
				if err == nil {
					err = pipeline.Unmarshal(m.Data, false, &a.reply)
				}
				if err == nil && a.reply.Error != "" {
					err = errors.New(a.reply.Error)
				}
				a.err = err
			})
		}
	}
	wg.Wait()
	for _, a := range asks {
		h.Checked++
		switch {
		case a.err != nil:
			h.OK = false
			h.Lagging[a.name] = 1
			s.log.Debug("partition unavailable for health", "partition", a.name, "err", a.err)
		case !a.reply.OK:
			h.OK = false
			maps.Copy(h.Lagging, a.reply.Lagging)
		}
	}
	return h, nil
}

// partHealth is the health of one partition owned here, for another process's health.
func (s *Server) partHealth(ctx context.Context, key partKey) (*pipeline.HealthReply, error) {
	o := (*s.owners.Load())[key.family][key.p]
	if o == nil {
		return nil, fmt.Errorf("%w: partition %s/%d is no longer in this process", errUnavailable, key.family, key.p)
	}
	h := s.newHealth()
	if err := check(ctx, h, counterName(key.family, key.p), o, o.Ready()); err != nil {
		return nil, err
	}
	return h, nil
}

// SetEvents tells the server that this process now owns the event stages: it starts
// answering the queries that read relations (liked, the lists, unread) and reports the
// stages' lag in health. Until then those queries are left to the process that owns them.
func (s *Server) SetEvents(stages map[string]Lagger, pulled *cold.Pulled) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.events.Load() != nil {
		return fmt.Errorf("the event stages are already served here")
	}
	s.events.Store(&events{stages: stages, pulled: pulled})
	if !s.started {
		return nil
	}
	if err := s.subscribe(s.relationHandlers()); err != nil {
		return err
	}
	return s.nc.Flush()
}

func (s *Server) relationHandlers() map[string]func(*request) (any, error) {
	sj := s.cfg.Subjects
	return map[string]func(*request) (any, error){
		sj.Liked():     s.liked,
		sj.LikesUser(): s.list(cold.Like, true, "uid"),
		sj.LikesPost(): s.list(cold.Like, false, "post"),
		sj.Following(): s.list(cold.Follow, true, "uid"),
		sj.Followers(): s.list(cold.Follow, false, "uid"),
		sj.Unread():    s.unreadCounts,
		sj.Health():    s.health,
	}
}

// subscribe subscribes each handler's subject Workers times in QueueGroup.
func (s *Server) subscribe(handlers map[string]func(*request) (any, error)) error {
	sj := s.cfg.Subjects
	for subj, h := range handlers {
		kind := strings.TrimPrefix(strings.TrimSuffix(subj, ".*"), sj.Prefix+".")
		for range s.cfg.Workers {
			sub, err := s.nc.QueueSubscribe(subj, QueueGroup, s.handle(kind, h))
			if err != nil {
				return fmt.Errorf("cannot subscribe %s: %w", subj, err)
			}
			s.subs = append(s.subs, sub)
		}
	}
	return nil
}

func (s *Server) eventStages() map[string]Lagger {
	if e := s.events.Load(); e != nil {
		return e.stages
	}
	return nil
}
