package event

import (
	"fmt"
	"testing"

	"github.com/tally-dev/tally/pipeline"
)

func TestWindowMinute(t *testing.T) {
	const now = 29_000_000 // a Unix minute
	ms := func(minute uint32, s int64) int64 { return int64(minute)*60_000 + s*1000 }
	f := func(ts int64, now, want uint32) {
		t.Helper()
		if got := windowMinute(ts, now); got != want {
			t.Fatalf("windowMinute(%d, %d) = %d, want %d", ts, now, got, want)
		}
	}
	f(ms(now, 59), now, now)          // the last second of the minute
	f(ms(now-1, 59), now, now-1)      // the minute before
	f(ms(now-1439, 0), now, now-1439) // the oldest minute of the day
	f(ms(now-1440, 59), now, 0)       // a day before: no window, nothing sent
	f(ms(now+10, 0), now, now)        // after it was stored: counted when stored
	f(ms(now-3000, 0), 0, now-3000)   // no message yet: not cut
	f(0, now, 0)                      // no time
}

// TestCoalescerWindows: the adds of a transaction are summed per counter and minute of
// their event, an unlike at its own minute; sets and changes that net to 0 make none.
func TestCoalescerWindows(t *testing.T) {
	c := newCoalescer(1)
	like := fieldRef{family: "post", field: 0}
	unread := fieldRef{family: "unread", field: 2}
	c.minute = 100
	c.add(like, 42, pipeline.OpAdd, 1)
	c.add(like, 42, pipeline.OpAdd, 1)
	c.add(unread, 7, pipeline.OpSet, 0)
	c.minute = 101
	c.add(like, 42, pipeline.OpAdd, -1) // the unlike, at its own minute
	c.add(like, 43, pipeline.OpAdd, 1)
	c.add(like, 43, pipeline.OpAdd, -1) // nets to 0 in its minute
	c.minute = 0
	c.add(like, 44, pipeline.OpAdd, 1) // a day old: counted, in no window
	var got []string
	for _, d := range c.order {
		for _, w := range c.byDest[d].windowDeltas() {
			got = append(got, fmt.Sprintf("%s %d.%d@%d%+d", d.family, w.ID, w.Field, w.Minute, w.N))
		}
	}
	want := "[post 42.0@100+2 post 42.0@101-1]"
	if fmt.Sprint(got) != want {
		t.Fatalf("windows %v, want %s", got, want)
	}
	// The counters coalesce as without windows.
	if d := c.byDest[dest{"post", 0}].deltas; len(d) != 5 || d[0].N != 2 || d[1].N != -1 {
		t.Fatalf("deltas %v", d)
	}
}
