package pipeline

import (
	"testing"
	"time"
)

// TestHushDropsPastSilences: hushing a process drops the silences that have ended, so
// that a long-lived client or tallyd does not keep one for every process that ever went
// silent or away (each start of a tallyd has a token of its own); a silence still on is
// kept, and Quiet says so while it lasts and drops it once ended. Before (the client's
// own silences), an ended silence stayed until its token was named again, which a
// process gone never is.
func TestHushDropsPastSilences(t *testing.T) {
	var s Silences
	s.until.Store("gone", time.Now().Add(-time.Second))
	s.until.Store("quiet", time.Now().Add(time.Minute))
	s.Hush("new", time.Minute)
	left := map[string]bool{}
	s.until.Range(func(t, _ any) bool { left[t.(string)] = true; return true })
	if left["gone"] || !left["quiet"] || !left["new"] || len(left) != 2 {
		t.Fatalf("silences left %v: want quiet and new", left)
	}
	s.until.Store("ended", time.Now().Add(-time.Second))
	if !s.Quiet("quiet") || s.Quiet("ended") || s.Quiet("never") {
		t.Fatalf("quiet: %v, ended %v, never %v; want true, false, false", s.Quiet("quiet"), s.Quiet("ended"), s.Quiet("never"))
	}
	if _, ok := s.until.Load("ended"); ok {
		t.Fatal("an ended silence asked of stays")
	}
}
