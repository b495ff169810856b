package systest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/stages/systest/rig"
	"github.com/tally-dev/tally/store/window"
)

// windowModel is the reference of the windowed counts: every change of a post's like
// count at the minute of the event that made it.
type windowModel map[uint64]map[int64]int64 // post → event time (ms) → change

// want is the net change of each post's likes in window at now.
func (m windowModel) want(posts []uint64, window string, now time.Time) string {
	out := make([]int64, len(posts))
	for i, p := range posts {
		out[i] = m.sum(p, window, now)
	}
	return fmt.Sprint(out)
}

// sum is the net change of post's likes in window at now.
func (m windowModel) sum(post uint64, window string, now time.Time) int64 {
	minutes, _ := pipeline.ParseWindow(window)
	since := pipeline.WindowSince(now, minutes)
	var n int64
	for ts, d := range m[post] {
		if m := pipeline.MinuteOf(ts); m >= since && m+pipeline.WindowDay > pipeline.MinuteOf(now.UnixMilli()) {
			n += d
		}
	}
	return n
}

// TestWindowsEndToEnd: likes and unlikes whose ts lie in different minutes, through a
// real Tally process, answer each window as the model does, an unlike at its own
// minute and what is a day old in none; after a SIGKILL and a restart, the same.
func TestWindowsEndToEnd(t *testing.T) {
	ch, c := startChild(t)
	ctx := context.Background()
	now := time.Now()
	ago := func(d time.Duration) int64 { return now.Add(-d).UnixMilli() }
	model := windowModel{}
	const owner = 9
	var evs []pipeline.Event
	act := func(typ string, uid, post uint64, ts int64) {
		e := pipeline.Event{Type: typ, UID: pipeline.ID(uid), Post: pipeline.ID(post), TS: ts}
		if typ == "like" {
			e.Owner = owner // notified, in the owner's partition or handed there
		}
		evs = append(evs, e)
		if model[post] == nil {
			model[post] = map[int64]int64{}
		}
		if typ == "like" {
			model[post][ts]++
		} else {
			model[post][ts]--
		}
	}
	posts := []uint64{500, 501, 502}
	act("like", 1, 500, ago(2*time.Minute))    // in every window
	act("like", 2, 500, ago(30*time.Minute))   // the hour and the day
	act("like", 3, 500, ago(10*time.Hour))     // the day
	act("like", 4, 500, ago(25*time.Hour))     // no window: counted, costs nothing
	act("unlike", 2, 500, ago(time.Minute))    // -1 at its own minute: the 5 minutes
	act("like", 1, 501, ago(50*time.Minute))   // the hour and the day
	act("unlike", 1, 501, ago(20*time.Minute)) // both
	act("like", 5, 502, ago(3*time.Hour))      // the day
	act("unlike", 5, 502, ago(90*time.Second)) // -1 in every window
	publishRetrying(t, c, "windows", evs)
	check := func(when string) {
		t.Helper()
		rig.Eventually(t, when+": the counts", func() (bool, string) {
			r, err := c.Get(ctx, "post", posts...)
			if err != nil {
				return false, err.Error()
			}
			got := fmt.Sprint(r.Counts[0][0], r.Counts[1][0], r.Counts[2][0])
			return got == "3 0 0", got
		})
		for _, w := range []string{"5m", "1h", "1d"} {
			rig.Eventually(t, when+": window "+w, func() (bool, string) {
				r, err := c.GetWindow(ctx, "post", w, posts...)
				if err != nil {
					return false, err.Error()
				}
				got := make([]int64, len(posts))
				for i := range posts {
					got[i] = r.Changes[i][0]
				}
				want := model.want(posts, w, time.Now())
				return r.Window == w && fmt.Sprint(got) == want, fmt.Sprintf("window %q: got %v, want %s", r.Window, got, want)
			})
			// The owner's unread likes change as the likes of its posts do, at the
			// minutes of the likes and unlikes, though counted in its own partition.
			rig.Eventually(t, when+": unread window "+w, func() (bool, string) {
				r, err := c.GetWindow(ctx, "unread", w, owner)
				if err != nil {
					return false, err.Error()
				}
				var want int64
				for _, p := range posts {
					want += model.sum(p, w, time.Now())
				}
				return r.Changes[0][2] == want, fmt.Sprintf("unread like of %d over %s: got %d, want %d", owner, w, r.Changes[0][2], want)
			})
		}
	}
	check("applied")
	ch.kill()
	ch.start()
	check("after kill -9")
	if _, err := c.GetWindow(ctx, "post", "2h", 500); err == nil {
		t.Fatal("a window of 2h answered")
	}
}

// compareWindows checks, for the posts and users of a run whose events are all of the
// last day, that each counter's change over the day is its value: every change counted
// in the windows exactly when, and as often as, in the counters, whatever the run's
// faults. (The families of adds only: a read's set changes no window.)
func compareWindows(t testing.TB, c *client.Client, posts, users []uint64) {
	t.Helper()
	ctx := context.Background()
	for _, fam := range []struct {
		name string
		ids  []uint64
	}{{"post", posts}, {"user", users}} {
		for len(fam.ids) > 0 {
			ids := fam.ids[:min(len(fam.ids), 1000)] // as rig.CheckReference asks: a reply NATS takes
			fam.ids = fam.ids[len(ids):]
			rig.Eventually(t, fam.name+" windows of a day equal to the counts", func() (bool, string) {
				r, err := c.Get(ctx, fam.name, ids...)
				if err != nil {
					return false, err.Error()
				}
				w, err := c.GetWindow(ctx, fam.name, "1d", ids...)
				if err != nil {
					return false, err.Error()
				}
				if len(r.Unavailable)+len(w.Unavailable) > 0 {
					return false, "unavailable ids"
				}
				for i, id := range ids {
					for f := range r.Counts[i] {
						if slices.Contains(r.Estimated, r.Fields[f]) { // viewers are set, not added: no window
							continue
						}
						if int64(r.Counts[i][f]) != w.Changes[i][f] {
							return false, fmt.Sprintf("%s %d %s: count %d, change over the day %d", fam.name, id, r.Fields[f], r.Counts[i][f], w.Changes[i][f])
						}
					}
				}
				return true, ""
			})
		}
	}
}

// TestTopEndToEnd: trending through a real Tally process — the posts whose likes grew
// most over the hour, each partition's top merged — is the reference model's top by
// like count (every like and unlike here is of the last minutes, so a post's change over
// the hour is its count), ties by id; through a SIGKILL in the middle, the same.
func TestTopEndToEnd(t *testing.T) {
	ch, c := startChild(t)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(5, 6))
	round := func(name string, n int) {
		evs := make([]pipeline.Event, n)
		for i := range evs {
			// Zipf-like: a few posts liked a lot, many a little; one like in five undone.
			post := pipeline.ID(1000 + r.IntN(1+r.IntN(300)))
			evs[i] = pipeline.Event{Type: "like", UID: pipeline.ID(1 + r.IntN(2000)), Post: post}
			if r.IntN(5) == 0 {
				evs[i].Type = "unlike"
			}
		}
		publishRetrying(t, c, name, evs)
	}
	check := func(when string) {
		t.Helper()
		ref := rig.StoredModel(t, c)
		var want []window.Ranked
		for p := uint64(1000); p < 1300; p++ {
			if n := ref.Counts("post", p)[0]; n > 0 {
				want = append(want, window.Ranked{ID: p, N: int64(n)})
			}
		}
		for _, k := range []int{1, 25, 1000} {
			rig.Eventually(t, fmt.Sprintf("%s: the top %d", when, k), func() (bool, string) {
				top, err := c.Top(ctx, "post", "like", "1h", k)
				if err != nil {
					return false, err.Error()
				}
				var got []window.Ranked
				for i, id := range top.IDs {
					got = append(got, window.Ranked{ID: uint64(id), N: top.Changes[i]})
				}
				w := window.Merge(k, want)
				return slices.Equal(got, w), fmt.Sprintf("%d ranked, first %v; want %d, first %v", len(got), got[:min(3, len(got))], len(w), w[:min(3, len(w))])
			})
		}
	}
	round("top1", 6000)
	check("before the kill")
	ch.kill()
	ch.start()
	round("top2", 6000)
	check("after the kill")
}
