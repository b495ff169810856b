package rig

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/stages/reference"
)

// StoredModel is the reference model of everything producers stored in the events
// stream of c's prefix, in the stream's order, counting in the default families or in
// fams when given.
func StoredModel(t testing.TB, c *client.Client, fams ...pipeline.Family) *reference.Model {
	t.Helper()
	js, err := jetstream.New(c.Conn())
	if err != nil {
		t.Fatal(err)
	}
	// A NATS cluster that lost a server may not answer a request for a moment ("no
	// responders", a timeout): the stream is read again, into a new model.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		ref := reference.New()
		if len(fams) > 0 {
			ref = reference.NewOf(fams)
		}
		_, err := ref.Stored(context.Background(), js, c.Subjects(), "", nil)
		if err == nil {
			return ref
		}
		if time.Now().After(deadline) {
			t.Fatalf("cannot read the stored stream: %v", err)
		}
	}
}

// CheckReference compares what Tally answers about users and posts with the reference
// model of the stored stream: the counters of every family and unread counts of every
// id; liked for every like the model has, and for every post of every every-th user;
// and the lists — likes, followers and following of every every-th user, likers of
// every every-th post — paged, in order (newest first, then by id), with their times. It
// reports the first differences and fails the test.
func CheckReference(t testing.TB, c *client.Client, ref *reference.Model, users, posts []uint64, every int) {
	t.Helper()
	ctx := context.Background()
	bad := 0
	fail := func(format string, args ...any) {
		t.Helper()
		if bad++; bad <= 20 {
			t.Errorf(format, args...)
		}
	}
	counts := func(family string, ids []uint64) {
		for len(ids) > 0 {
			k := min(len(ids), 1000)
			var r *pipeline.GetReply
			RetryUnavailable(t, "get "+family, func() (err error) {
				// Exact: a standby's count (stale) may be a moment behind.
				if r, err = c.GetWith(ctx, family, ids[:k], client.Exact()); err == nil && len(r.Unavailable) > 0 {
					err = fmt.Errorf("%w: %d ids", client.ErrUnavailable, len(r.Unavailable))
				}
				return err
			})
			for i, id := range ids[:k] {
				if want := ref.Counts(family, id); !slices.Equal(r.Counts[i], want) {
					fail("%s %d: tally %v, reference %v", family, id, r.Counts[i], want)
				}
			}
			ids = ids[k:]
		}
	}
	counts("post", posts)
	counts("user", users)
	for rest := users; len(rest) > 0; {
		k := min(len(rest), 500)
		var unread []pipeline.Unread
		RetryUnavailable(t, "unread", func() (err error) { unread, err = c.UnreadMany(ctx, rest[:k]...); return err })
		for i, u := range rest[:k] {
			if want := ref.Unread(u); unread[i] != want {
				fail("unread of %d: tally %+v, reference %+v", u, unread[i], want)
			}
		}
		rest = rest[k:]
	}
	liked := func(u uint64, posts []uint64) {
		for rest := posts; len(rest) > 0; {
			k := min(len(rest), 1000)
			var got []bool
			RetryUnavailable(t, "liked", func() (err error) { got, err = c.Liked(ctx, u, rest[:k]...); return err })
			for i, p := range rest[:k] {
				if got[i] != ref.Liked(u, p) {
					fail("liked(%d, %d): tally %v, reference %v", u, p, got[i], ref.Liked(u, p))
				}
			}
			rest = rest[k:]
		}
	}
	for i, u := range users {
		liked(u, ref.LikedPosts(u)) // none missing
		if i%every != 0 {
			continue
		}
		liked(u, posts) // none extra
		for list, want := range map[string][]reference.Item{client.LikesOfUser: ref.Likes(u), client.Followers: ref.Followers(u), client.Following: ref.Following(u)} {
			if got := ListItems(t, c, list, u); !slices.Equal(got, want) {
				fail("%s of %d: tally %v, reference %v", list, u, got, want)
			}
		}
	}
	for i := 0; i < len(posts); i += every {
		p := posts[i]
		if got, want := ListItems(t, c, client.LikesOfPost, p), ref.Likers(p); !slices.Equal(got, want) {
			fail("likers of post %d: tally %v, reference %v", p, got, want)
		}
	}
	if bad > 0 {
		t.Fatalf("%d answers differ from the reference model of the stored stream", bad)
	}
}

// ListItems reads a whole list in pages of 7.
func ListItems(t testing.TB, c *client.Client, list string, id uint64) []reference.Item {
	t.Helper()
	var out []reference.Item
	for cursor := ""; ; {
		var p *client.Page
		RetryUnavailable(t, list, func() (err error) { p, err = c.List(context.Background(), list, id, 7, cursor); return err })
		for i, ts := range p.TS {
			out = append(out, reference.Item{ID: p.IDs[i], TS: ts})
		}
		if p.Next == "" {
			return out
		}
		cursor = p.Next
	}
}

// CountingTB is a testing.TB whose Errorf and Fatalf only count and keep the first 20
// messages: a check run through it (by Probe) says what differs without failing the
// test. Everything else is the test's.
type CountingTB struct {
	testing.TB
	Errors   int
	Messages []string
}

func (c *CountingTB) Errorf(format string, args ...any) {
	if c.Errors++; len(c.Messages) < 20 {
		c.Messages = append(c.Messages, fmt.Sprintf(format, args...))
	}
}

// Fatalf counts as Errorf does, then ends the check (see Probe).
func (c *CountingTB) Fatalf(format string, args ...any) {
	c.Errorf(format, args...)
	panic(probeEnded{})
}

// probeEnded is what a CountingTB's Fatalf panics with, for Probe to recover.
type probeEnded struct{}

// Probe runs check through a CountingTB of t and returns it: what check found wrong is
// counted there, not failed.
func Probe(t testing.TB, check func(testing.TB)) *CountingTB {
	c := &CountingTB{TB: t}
	func() {
		defer func() {
			if r := recover(); r != nil {
				if _, ended := r.(probeEnded); !ended {
					panic(r)
				}
			}
		}()
		check(c)
	}()
	return c
}
