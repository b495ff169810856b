package client

import (
	"testing"
	"time"
)

// TestHushDropsPastSilences: hushing a process drops the silences that have ended, so
// that a long-lived client does not keep one for every tallyd that ever went silent or
// away (each start of a tallyd has a token of its own). Before, an ended silence stayed
// until its token was named again, which a process gone never is.
func TestHushDropsPastSilences(t *testing.T) {
	var w where
	w.silent.Store("gone", time.Now().Add(-time.Second))
	w.silent.Store("quiet", time.Now().Add(time.Minute))
	w.hush("post", "new")
	left := map[string]bool{}
	w.silent.Range(func(t, _ any) bool { left[t.(string)] = true; return true })
	if left["gone"] || !left["quiet"] || !left["new"] || len(left) != 2 {
		t.Fatalf("silences left %v: want quiet and new", left)
	}
}
