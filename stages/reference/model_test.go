package reference

import (
	"slices"
	"testing"

	"github.com/tally-dev/tally/pipeline"
)

// TestModel pins the model's reading of the stream's order: a read covers exactly the
// events before it; a follow sees only later posts; an unfollow takes them back; an
// unlike takes its notification back; a relation made twice keeps its first place.
func TestModel(t *testing.T) {
	m := NewOf(pipeline.WithViewers(pipeline.DefaultFamilies())) // posts count their viewers
	for i, e := range []pipeline.Event{
		{Type: "post", UID: 2, Post: 10},
		{Type: "follow", UID: 1, Target: 2},
		{Type: "post", UID: 2, Post: 11},
		{Type: "read", UID: 1, Kinds: []string{"feed"}},
		{Type: "post", UID: 2, Post: 12},
		{Type: "follow", UID: 1, Target: 3},
		{Type: "post", UID: 3, Post: 13},
		{Type: "unfollow", UID: 1, Target: 3},
		{Type: "like", UID: 3, Post: 10, Owner: 1},
		{Type: "read", UID: 1, Kinds: []string{"like"}},
		{Type: "like", UID: 4, Post: 10, Owner: 1, TS: 50},
		{Type: "like", UID: 4, Post: 10, Owner: 1, TS: 60}, // liked already: keeps its time
		{Type: "like", UID: 5, Post: 10, Owner: 1},
		{Type: "unlike", UID: 5, Post: 10}, // takes its notification back
		{Type: "unlike", UID: 6, Post: 10}, // of nothing
		{Type: "dm", UID: 4, Target: 1},
		{Type: "dm", UID: 1, Target: 1}, // to oneself
		{Type: "system", ID: 1},
		{Type: "read", UID: 1, Kinds: []string{"system"}},
		{Type: "system", ID: 2},
		{Type: "incr", Family: "post", ID: 10, Field: "view", N: 3},
		{Type: "incr", Family: "post", ID: 10, Field: "view", N: -5},
		{Type: "incr", Family: "post", ID: 10, Field: "view", N: 4},
		{Type: "read", UID: 7}, // every kind
		{Type: "view", UID: 5, Post: 11},
		{Type: "view", UID: 5, Post: 11, N: 2}, // the same viewer again
		{Type: "view", UID: 6, Post: 11},
		{Type: "view", Post: 11}, // nobody said
	} {
		e.Seq = uint64(i + 1)
		if err := m.Apply(e); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := m.Unread(1), (pipeline.Unread{Like: 1, DM: 1, System: 1, Feed: 1}); got != want {
		t.Fatalf("unread of 1: %+v, want %+v", got, want)
	}
	if got, want := m.Unread(7), (pipeline.Unread{}); got != want {
		t.Fatalf("unread of 7 after reading everything: %+v, want %+v", got, want)
	}
	if got := m.Counts("post", 10); !slices.Equal(got, []uint64{2, 0, 0, 4, 0}) {
		t.Fatalf("post 10: %v, want 2 likes and 4 views (3, then 0, then 4)", got)
	}
	if got := m.Counts("post", 11); !slices.Equal(got, []uint64{0, 0, 0, 5, 2}) || m.Viewers(11) != 2 {
		t.Fatalf("post 11: %v and %d viewers, want 5 views by 2 viewers", got, m.Viewers(11))
	}
	if got, want := m.Likers(10), []Item{{ID: 4, TS: 50}, {ID: 3, TS: 0}}; !slices.Equal(got, want) {
		t.Fatalf("likers of 10: %v, want %v", got, want)
	}
	if got := m.Following(1); len(got) != 1 || got[0].ID != 2 {
		t.Fatalf("1 follows %v, want 2 only", got)
	}
	if err := m.Apply(pipeline.Event{Type: "view", Post: 1, Seq: 3}); err == nil {
		t.Fatalf("an event placed before the last one applied was taken")
	}
}

// TestModelWithoutViewers: with the default families, views with a uid count as views
// and no viewers are counted.
func TestModelWithoutViewers(t *testing.T) {
	m := New()
	for i, u := range []pipeline.ID{5, 6, 5} {
		if err := m.Apply(pipeline.Event{Type: "view", Post: 11, UID: u, Seq: uint64(i + 1)}); err != nil {
			t.Fatal(err)
		}
	}
	if got := m.Counts("post", 11); !slices.Equal(got, []uint64{0, 0, 0, 3}) {
		t.Fatalf("post 11: %v, want 3 views and no viewers field", got)
	}
}
