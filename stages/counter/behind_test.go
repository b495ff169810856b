package counter

import (
	"context"
	"testing"
	"time"

	"github.com/tally-dev/tally/stages/flow"
)

// TestBehindAtCaughtUp: a standby's reading of how far behind it is, served to the
// reads after it for staleEvery, ages while messages it counted are still to apply, and
// says nothing behind once they all are. Before, the age was kept with none left: a
// stale read said up to 100 ms behind with behind_msgs absent, where the protocol says
// 0 when every delta is applied.
func TestBehindAtCaughtUp(t *testing.T) {
	var w Worker
	w.staleBehind.at, w.staleBehind.pos = time.Now().Add(-40*time.Millisecond), 10
	w.staleBehind.behind = flow.Behind{Msgs: 3, Age: 50 * time.Millisecond}
	b, err := w.behindAt(context.Background(), 11)
	if err != nil || b.Msgs != 2 || b.Age < 90*time.Millisecond {
		t.Fatalf("one of 3 messages applied since: %+v, %v; want 2 left, at least 90 ms old", b, err)
	}
	b, err = w.behindAt(context.Background(), 13)
	if err != nil || b.Msgs != 0 || b.Age != 0 {
		t.Fatalf("all 3 applied since: %+v, %v; want nothing behind", b, err)
	}
}
