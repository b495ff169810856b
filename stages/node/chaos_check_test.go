package node_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/natstest"
)

// chaosReportOnly are the checks of the chaos test that are logged, not asserted, with
// why: none now. Unread follows the stream's order across partitions (issue 13). One case
// is left that the workload avoids (see chaosGen.rawEvent): a relation made twice in raw
// batches of different partitions is made by whichever copy reaches its partition first,
// and its notification or follow is placed there, while the stream places it at the
// first copy stored.
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
func chaosCompare(t *testing.T, c *client.Client, js jetstream.JetStream, ref *chaosModel, g *chaosGen, r *chaosReport) {
	t.Helper()
	ctx := context.Background()
	var posts, users []uint64
	for p := range g.posts {
		posts = append(posts, uint64(1<<41+p))
	}
	for u := 1; u <= g.users(); u++ {
		users = append(users, uint64(u))
	}
	quiet := func(u uint64) bool { return u <= uint64(g.quiet) }
	tally := map[string]map[uint64][]uint64{"post": chaosGet(t, c, "post", posts), "user": chaosGet(t, c, "user", users), "unread": chaosGet(t, c, "unread", users)}
	want := map[string]func(uint64) []uint64{
		"post": func(id uint64) []uint64 {
			if v := ref.post[id]; v != nil {
				return v[:]
			}
			return make([]uint64, 4)
		},
		"user": func(id uint64) []uint64 {
			if v := ref.user[id]; v != nil {
				return v[:]
			}
			return make([]uint64, 3)
		},
	}
	for _, fam := range []string{"post", "user"} {
		for id, got := range tally[fam] {
			if w := want[fam](id); !slices.Equal(got, w) {
				r.fail("counts."+fam, "%s %d: tally %v, model %v", fam, id, got, w)
			}
		}
		r.done("counts."+fam, len(tally[fam]), fam+" counts of every id")
	}

	// Unread: notifications and notices of quiet users are asserted; of the others, and
	// feed unread of all, reported.
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
		got, w := unread[u], ref.want(u)
		notify, fam := "unread.notify", "unread.system"
		if !quiet(u) {
			notify, fam = "unread.order", "unread.order"
		}
		gotN, wantN := [4]uint64{got.Comment, got.Mention, got.Like, got.DM}, [4]uint64{w.Comment, w.Mention, w.Like, w.DM}
		if gotN != wantN {
			r.fail(notify, "user %d: tally comment,mention,like,dm %v, model %v", u, gotN, wantN)
		}
		if row := tally["unread"][u]; !slices.Equal(row[:4], wantN[:]) {
			r.fail(notify, "user %d: tally.get.unread %v, model %v", u, row[:4], wantN)
		}
		if got.System != w.System {
			r.fail(fam, "user %d: system unread %d, model %d", u, got.System, w.System)
		}
		if got.Feed != w.Feed {
			r.fail("unread.feed", "user %d: feed unread %d, model %d", u, got.Feed, w.Feed)
		}
	}
	r.done("unread.notify", 2*4*g.quiet, "notification unread of the quiet readers (tally.unread and tally.get.unread)")
	r.done("unread.system", g.quiet, "system notices unread of the quiet readers")
	r.done("unread.order", (2*4+1)*(len(users)-g.quiet), "notifications and notices unread of racing readers and forward users")
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
			w := want[fam](id)
			if m := chaosOrZero(mirror[fam][id], len(w)); !slices.Equal(m, w) {
				r.fail("mirror."+fam, "%s %d: mirror %v, model %v", fam, id, m, w)
			}
		}
		r.done("mirror."+fam, len(tally[fam]), fmt.Sprintf("last value per id of tally.chg.%s.* (%d change events in all)", fam, changes))
	}
	for _, u := range users {
		w := ref.want(u)
		m := chaosOrZero(mirror["unread"][u], 5)
		check := "mirror.unread"
		if !quiet(u) {
			check = "unread.order"
		}
		if wantN := []uint64{w.Comment, w.Mention, w.Like, w.DM}; !slices.Equal(m[:4], wantN) {
			r.fail(check, "user %d: mirror of unread %v, model %v", u, m[:4], wantN)
		}
	}
	r.done("mirror.unread", 4*g.quiet, "last value per id of tally.chg.unread.*, notifications of the quiet readers")
}

// chaosRelations checks likes (every like of the model is there; for a sample of users
// no other is) and lists (likes of a user, followers of a user, likers of a post, paged).
func chaosRelations(t *testing.T, c *client.Client, ref *chaosModel, users, posts []uint64, r *chaosReport) {
	t.Helper()
	ctx := context.Background()
	likedBy := map[uint64][]uint64{}
	for k := range ref.likes {
		likedBy[k[0]] = append(likedBy[k[0]], k[1])
	}
	n := 0
	for u, ps := range likedBy {
		for rest := ps; len(rest) > 0; {
			k := min(len(rest), 1000)
			liked, err := c.Liked(ctx, u, rest[:k]...)
			if err != nil {
				t.Fatal(err)
			}
			for i, p := range rest[:k] {
				n++
				if !liked[i] {
					r.fail("relations.liked", "liked(%d, %d) = false, model true", u, p)
				}
			}
			rest = rest[k:]
		}
	}
	for i := 0; i < len(users); i += 7 {
		u := users[i]
		for rest := posts; len(rest) > 0; {
			k := min(len(rest), 1000)
			liked, err := c.Liked(ctx, u, rest[:k]...)
			if err != nil {
				t.Fatal(err)
			}
			for j, p := range rest[:k] {
				n++
				if liked[j] != ref.likes[[2]uint64{u, p}] {
					r.fail("relations.liked", "liked(%d, %d) = %v, model %v", u, p, liked[j], !liked[j])
				}
			}
			rest = rest[k:]
		}
	}
	r.done("relations.liked", n, "liked(user, post): every like of the model, and every post for every 7th user")

	likes, followers := map[uint64][]uint64{}, map[uint64][]uint64{}
	for k := range ref.likes {
		likes[k[0]] = append(likes[k[0]], k[1])
	}
	for k := range ref.follows {
		followers[k[1]] = append(followers[k[1]], k[0])
	}
	lists := 0
	for i := 0; i < len(users); i += 3 {
		u := users[i]
		for _, l := range []struct {
			name string
			want []uint64
		}{{client.LikesOfUser, likes[u]}, {client.Followers, followers[u]}} {
			lists++
			if got := listAll(t, c, l.name, u); !sameSet(got, l.want) {
				sort.Slice(got, func(a, b int) bool { return got[a] < got[b] })
				r.fail("relations.lists", "%s of %d: tally %d ids, model %d", l.name, u, len(got), len(l.want))
			}
		}
	}
	likers := map[uint64][]uint64{}
	for k := range ref.likes {
		likers[k[1]] = append(likers[k[1]], k[0])
	}
	for i := 0; i < len(posts); i += 3 {
		lists++
		if got := listAll(t, c, client.LikesOfPost, posts[i]); !sameSet(got, likers[posts[i]]) {
			r.fail("relations.lists", "%s of %d: tally %d ids, model %d", client.LikesOfPost, posts[i], len(got), len(likers[posts[i]]))
		}
	}
	r.done("relations.lists", lists, "likes of a user and followers of a user for every 3rd user, likers of every 3rd post, paged")
}
