package pipeline

import (
	"sync"
	"time"
)

// Silences are the processes (by their peer token, see WhereHeader) not to be asked
// directly for a while, each until when: one that did not answer in time (paused, hung)
// or had no responders. What a tallyd learns of its peers and what a client learns of
// where partitions are served both keep them. Safe for concurrent use.
type Silences struct {
	until sync.Map // token → time.Time
}

// Quiet reports whether token is silenced now; a silence that has ended is dropped.
func (s *Silences) Quiet(token string) bool {
	until, ok := s.until.Load(token)
	if !ok {
		return false
	}
	if time.Now().Before(until.(time.Time)) {
		return true
	}
	s.until.Delete(token)
	return false
}

// Hush silences token for d. The silences that have ended are dropped, those of
// processes gone for good too (each start of a tallyd has a token of its own): bounded.
func (s *Silences) Hush(token string, d time.Duration) {
	now := time.Now()
	s.until.Range(func(t, until any) bool {
		if now.After(until.(time.Time)) {
			s.until.Delete(t)
		}
		return true
	})
	s.until.Store(token, now.Add(d))
}
