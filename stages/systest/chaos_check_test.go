package systest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/natstest"
	"github.com/tally-dev/tally/stages/reference"
	"github.com/tally-dev/tally/stages/systest/rig"
)

// chaosReportOnly are the checks of the chaos test that are logged, not asserted, with
// why: none. Unread follows the stream's order across partitions (issue 13), and so do
// relations, whichever road brings their events (issue 22).
var chaosReportOnly = map[string]string{}

// chaosReport collects the outcome of each named check.
type chaosReport struct {
	t      *testing.T
	order  []string
	checks map[string]*chaosCheck
}

type chaosCheck struct {
	what     string
	compared int
	failed   int
	examples []string
}

func (r *chaosReport) check(name string) *chaosCheck {
	if r.checks == nil {
		r.checks = map[string]*chaosCheck{}
	}
	c := r.checks[name]
	if c == nil {
		c = &chaosCheck{}
		r.checks[name] = c
		r.order = append(r.order, name)
	}
	return c
}

func (r *chaosReport) fail(name, format string, args ...any) {
	c := r.check(name)
	c.failed++
	if len(c.examples) < 5 {
		c.examples = append(c.examples, fmt.Sprintf(format, args...))
	}
}

// done records how many values a check compared.
func (r *chaosReport) done(name string, compared int, what string) {
	c := r.check(name)
	c.compared += compared
	c.what = what
}

// summary logs every check and fails the test for each asserted one that failed.
func (r *chaosReport) summary() {
	var b strings.Builder
	for _, name := range r.order {
		c := r.checks[name]
		status := "exact"
		if c.failed > 0 {
			status = fmt.Sprintf("%d WRONG", c.failed)
		}
		if why, ok := chaosReportOnly[name]; ok {
			status += " (not asserted: " + why + ")"
		}
		fmt.Fprintf(&b, "\n  %-16s %7d compared, %s — %s", name, c.compared, status, c.what)
		for _, e := range c.examples {
			fmt.Fprintf(&b, "\n      e.g. %s", e)
		}
	}
	r.t.Logf("chaos checks:%s", b.String())
	for _, name := range r.order {
		if c := r.checks[name]; c.failed > 0 {
			if _, ok := chaosReportOnly[name]; !ok {
				r.t.Errorf("chaos check %s: %d of %d wrong, e.g. %s", name, c.failed, c.compared, c.examples[0])
			}
		}
	}
}

func chaosHealthy(t testing.TB, c *client.Client, what string, timeout time.Duration) {
	t.Helper()
	natstest.Eventually(t, timeout, what, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		h, err := c.Health(ctx)
		if err != nil {
			return false, err.Error()
		}
		return h.OK, fmt.Sprint(h.Lagging)
	})
}

// chaosGet asks a family's counts of ids, a thousand at a time.
func chaosGet(t *testing.T, c *client.Client, family string, ids []uint64) map[uint64][]uint64 {
	t.Helper()
	out := map[uint64][]uint64{}
	for rest := ids; len(rest) > 0; {
		k := min(len(rest), 1000)
		r, err := c.Get(context.Background(), family, rest[:k]...)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Unavailable) > 0 {
			t.Fatalf("%s: %d ids unavailable with every partition caught up", family, len(r.Unavailable))
		}
		for i, id := range rest[:k] {
			out[id] = r.Counts[i]
		}
		rest = rest[k:]
	}
	return out
}

func chaosOrZero(v []uint64, n int) []uint64 {
	if v == nil {
		return make([]uint64, n)
	}
	return v
}

// chaosCompare compares Tally, and a mirror of its change events, with the model.
func chaosCompare(t *testing.T, c *client.Client, js jetstream.JetStream, ref *reference.Model, g *chaosGen, r *chaosReport) {
	t.Helper()
	ctx := context.Background()
	posts, users := g.ids("post"), g.ids("user")
	tally := map[string]map[uint64][]uint64{"post": chaosGet(t, c, "post", posts), "user": chaosGet(t, c, "user", users), "unread": chaosGet(t, c, "unread", users)}
	for _, fam := range []string{"post", "user"} {
		for id, got := range tally[fam] {
			if w := ref.Counts(fam, id); !slices.Equal(got, w) {
				r.fail("counts."+fam, "%s %d: tally %v, model %v", fam, id, got, w)
			}
		}
		r.done("counts."+fam, len(tally[fam]), fam+" counts of every id")
	}
	viewed, most := 0, 0
	for _, p := range posts {
		if n := ref.Viewers(p); n > 0 {
			viewed, most = viewed+1, max(most, n)
		}
	}
	r.done("counts.viewers", viewed, fmt.Sprintf("posts viewed by a user named, their distinct viewers among the post counts (at most %d a post: exact)", most))

	unread := map[uint64]pipeline.Unread{}
	for rest := users; len(rest) > 0; {
		k := min(len(rest), 100)
		got, err := c.UnreadMany(ctx, rest[:k]...)
		if err != nil {
			t.Fatal(err)
		}
		for i, u := range rest[:k] {
			unread[u] = got[i]
		}
		rest = rest[k:]
	}
	for _, u := range users {
		got, w := unread[u], ref.Unread(u)
		gotN, wantN := [4]uint64{got.Comment, got.Mention, got.Like, got.DM}, [4]uint64{w.Comment, w.Mention, w.Like, w.DM}
		if gotN != wantN {
			r.fail("unread.notify", "user %d: tally comment,mention,like,dm %v, model %v", u, gotN, wantN)
		}
		if row := tally["unread"][u]; !slices.Equal(row[:4], wantN[:]) {
			r.fail("unread.notify", "user %d: tally.get.unread %v, model %v", u, row[:4], wantN)
		}
		if got.System != w.System {
			r.fail("unread.system", "user %d: system unread %d, model %d", u, got.System, w.System)
		}
		if got.Feed != w.Feed {
			r.fail("unread.feed", "user %d: feed unread %d, model %d", u, got.Feed, w.Feed)
		}
	}
	r.done("unread.notify", 2*4*len(users), "notification unread of every user (tally.unread and tally.get.unread)")
	r.done("unread.system", len(users), "system notices unread of every user")
	r.done("unread.feed", len(users), "feed unread of every user")

	chaosRelations(t, c, ref, users, posts, r)

	// The mirror: the last value per id of every change event. It must hold what Tally
	// answers (once the last flushes are announced) and so equal the model.
	var mirror map[string]map[uint64][]uint64
	var changes, ids int
	var diffs []string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var err error
		mirror, changes, err = changeMirror(ctx, js, c.Subjects())
		if err != nil {
			if time.Now().After(deadline) {
				t.Fatal(err)
			}
			continue
		}
		diffs, ids = diffs[:0], 0
		for _, fam := range []string{"post", "user", "unread"} {
			for _, id := range slices.Sorted(maps.Keys(tally[fam])) {
				ids++
				v := tally[fam][id]
				if m := chaosOrZero(mirror[fam][id], len(v)); !slices.Equal(m, v) {
					diffs = append(diffs, fmt.Sprintf("%s %d: mirror %v, tally %v", fam, id, m, v))
				}
			}
		}
		if len(diffs) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, d := range diffs {
		r.fail("mirror.complete", "%s", d)
	}
	r.done("mirror.complete", ids, "the mirror holds what tally answers for every id of every family (no change event lost)")
	for _, fam := range []string{"post", "user"} {
		for id := range tally[fam] {
			w := ref.Counts(fam, id)
			if m := chaosOrZero(mirror[fam][id], len(w)); !slices.Equal(m, w) {
				r.fail("mirror."+fam, "%s %d: mirror %v, model %v", fam, id, m, w)
			}
		}
		r.done("mirror."+fam, len(tally[fam]), fmt.Sprintf("last value per id of tally.chg.%s.* (%d change events in all)", fam, changes))
	}
	for _, u := range users {
		w := ref.Unread(u)
		m := chaosOrZero(mirror["unread"][u], 5)
		if wantN := []uint64{w.Comment, w.Mention, w.Like, w.DM}; !slices.Equal(m[:4], wantN) {
			r.fail("mirror.unread", "user %d: mirror of unread %v, model %v", u, m[:4], wantN)
		}
	}
	r.done("mirror.unread", 4*len(users), "last value per id of tally.chg.unread.*, notifications of every user")
}

// chaosRelations checks likes (every like of the model is there; for every 7th user no
// other is) and lists, paged, in order and with their times: likes, followers and
// following of every 3rd user, likers of every 3rd post.
func chaosRelations(t *testing.T, c *client.Client, ref *reference.Model, users, posts []uint64, r *chaosReport) {
	t.Helper()
	ctx := context.Background()
	n := 0
	liked := func(u uint64, posts []uint64) {
		for rest := posts; len(rest) > 0; {
			k := min(len(rest), 1000)
			got, err := c.Liked(ctx, u, rest[:k]...)
			if err != nil {
				t.Fatal(err)
			}
			for i, p := range rest[:k] {
				n++
				if got[i] != ref.Liked(u, p) {
					r.fail("relations.liked", "liked(%d, %d) = %v, model %v", u, p, got[i], !got[i])
				}
			}
			rest = rest[k:]
		}
	}
	for i, u := range users {
		liked(u, ref.LikedPosts(u))
		if i%7 == 0 {
			liked(u, posts)
		}
	}
	r.done("relations.liked", n, "liked(user, post): every like of the model, and every post for every 7th user")
	lists := 0
	for i := 0; i < len(users); i += 3 {
		u := users[i]
		for name, want := range map[string][]reference.Item{client.LikesOfUser: ref.Likes(u), client.Followers: ref.Followers(u), client.Following: ref.Following(u)} {
			lists++
			if got := rig.ListItems(t, c, name, u); !slices.Equal(got, want) {
				r.fail("relations.lists", "%s of %d: tally %v, model %v", name, u, got, want)
			}
		}
	}
	for i := 0; i < len(posts); i += 3 {
		lists++
		if got, want := rig.ListItems(t, c, client.LikesOfPost, posts[i]), ref.Likers(posts[i]); !slices.Equal(got, want) {
			r.fail("relations.lists", "%s of %d: tally %v, model %v", client.LikesOfPost, posts[i], got, want)
		}
	}
	r.done("relations.lists", lists, "likes, followers and following of every 3rd user, likers of every 3rd post, paged, in order, with times")
}
