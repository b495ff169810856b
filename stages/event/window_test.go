package event

import (
	"fmt"
	"maps"
	"math/rand/v2"
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

// The window changes a coalescer sends are the sums of its adds per counter and minute
// of their events, each counter and minute once, whatever order the minutes come in
// (back to an earlier one, as events stored out of time order do), over transactions
// that reuse what reset emptied, one of them past what a destination keeps room for.
func TestCoalescerWindowsByMinute(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	c := newCoalescer(3)
	fams := []fieldRef{{family: "post", field: 0}, {family: "post", field: 3}, {family: "unread", field: 2}}
	for round := range 40 {
		type at struct {
			family string
			id     uint64
			field  uint8
			minute uint32
		}
		want := map[at]int64{}
		adds := 1 + r.IntN(300)
		if round == 7 {
			adds = 8 * keepDeltas // distinct ids: more deltas than a destination keeps room for
		}
		for i := range adds {
			f, id := fams[r.IntN(len(fams))], uint64(1+r.IntN(6))
			if round == 7 {
				f, id = fams[0], uint64(100+i)
			}
			c.minute = []uint32{0, 500, 501, 502}[r.IntN(4)]
			op, n := pipeline.OpAdd, int64(r.IntN(7)-3)
			if r.IntN(8) == 0 {
				op = pipeline.OpSet
			}
			c.add(f, pipeline.ID(id), op, n)
			if c.minute != 0 && op == pipeline.OpAdd {
				want[at{f.family, id, f.field, c.minute}] += n
			}
		}
		got := map[at]int64{}
		for _, d := range c.order {
			for _, w := range c.byDest[d].windowDeltas() {
				k := at{d.family, w.ID, w.Field, w.Minute}
				if _, twice := got[k]; twice {
					t.Fatalf("round %d: %v sent twice", round, k)
				}
				got[k] = w.N
			}
		}
		maps.DeleteFunc(want, func(_ at, n int64) bool { return n == 0 })
		if !maps.Equal(got, want) {
			t.Fatalf("round %d: windows %v, want %v", round, got, want)
		}
		c.reset()
	}
}
