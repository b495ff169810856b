package query

import (
	"errors"
	"testing"
	"time"

	"github.com/tally-dev/tally/store/window"
)

// A watched top is published while watched, only when it changed from what was last
// answered or published, and forgotten once its time is up.
func TestWatches(t *testing.T) {
	var ws watches
	t0 := time.Unix(1_000_000, 0)
	w := topWatch{family: "post", field: "like", window: "1h", minutes: 60, k: 2}
	a := []window.Ranked{{ID: 42, N: 3}, {ID: 43, N: 1}}
	b := []window.Ranked{{ID: 43, N: 5}, {ID: 42, N: 3}}
	if err := ws.watch(w, a, t0, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	f := func(t *testing.T, at time.Duration, ranked []window.Ranked, live, changed bool) {
		t.Helper()
		if got := len(ws.live(t0.Add(at))) == 1; got != live {
			t.Fatalf("at %v: watched %v, want %v", at, got, live)
		}
		if got := ws.changed(w, ranked); got != changed {
			t.Fatalf("at %v: changed %v, want %v", at, got, changed)
		}
	}
	f(t, time.Second, a, true, false)  // as answered to the watcher
	f(t, 2*time.Second, b, true, true) // the lead changed
	f(t, 3*time.Second, b, true, false)
	_ = ws.watch(w, a, t0.Add(20*time.Second), 30*time.Second) // asked again: watched on, last kept
	f(t, 45*time.Second, a, true, true)
	f(t, 51*time.Second, b, false, false) // 30 s after the last ask: forgotten
	if len(ws.m) != 0 {
		t.Fatalf("a top no longer watched is kept: %v", ws.m)
	}
}

// Past maxWatched tops a new one is refused, with an error that says why; those watched
// already are still served.
func TestWatchesBounded(t *testing.T) {
	var ws watches
	now := time.Unix(1_000_000, 0)
	for k := range maxWatched {
		if err := ws.watch(topWatch{family: "post", field: "like", window: "1h", k: 1 + k}, nil, now, time.Minute); err != nil {
			t.Fatalf("top %d: %v", k, err)
		}
	}
	if err := ws.watch(topWatch{family: "post", field: "like", window: "1h", k: maxWatched + 1}, nil, now, time.Minute); !errors.Is(err, errUnavailable) {
		t.Fatalf("a watch past %d tops: %v, want unavailable", maxWatched, err)
	}
	if err := ws.watch(topWatch{family: "post", field: "like", window: "1h", k: 1}, nil, now, time.Minute); err != nil {
		t.Fatalf("a top watched already: %v", err)
	}
}
