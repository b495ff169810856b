package query

import (
	"fmt"

	"github.com/tally-dev/tally/store/cold"
)

// events is what the queries that read relations need: the event stages own the
// relations, and only the process that owns them has them all.
type events struct {
	stages map[string]Lagger
	pulled *cold.Pulled
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
		sj.Audit():     s.audit,
	}
}

// subscribe serves each handler's subject as an endpoint of the query service, in
// QueueGroup (see micro.go).
func (s *Server) subscribe(handlers map[string]func(*request) (any, error)) error {
	return s.addEndpoints(handlers)
}

func (s *Server) eventStages() map[string]Lagger {
	if e := s.events.Load(); e != nil {
		return e.stages
	}
	return nil
}
