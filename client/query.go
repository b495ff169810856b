package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/pipeline"
)

// request sends req as MessagePack and decodes the reply into reply. An error field in
// the reply becomes an error wrapping ErrRemote and the sentinel of the reply's code; no
// answer at all (no responders, a timeout) wraps ErrUnavailable.
func (c *Client) request(ctx context.Context, subject string, req, reply any, errField, code *string) error {
	_, err := c.ask(ctx, subject, nil, req, reply, errField, code)
	return err
}

// ask is request with the request's headers hdr, returning the reply's.
func (c *Client) ask(ctx context.Context, subject string, hdr nats.Header, req, reply any, errField, code *string) (nats.Header, error) {
	data, err := pipeline.Marshal(req, false)
	if err != nil {
		return nil, err
	}
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	msg, err := c.replies.request(ctx, &nats.Msg{Subject: subject, Header: hdr, Data: data})
	if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
		return nil, fmt.Errorf("%w: %s: %w", ErrUnavailable, subject, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", subject, err)
	}
	if err := pipeline.UnmarshalReply(msg.Data, false, reply); err != nil {
		return nil, fmt.Errorf("%s: cannot decode reply: %w", subject, err)
	}
	if *errField != "" {
		if sentinel := pipeline.CodeError(*code); sentinel != nil {
			// The reply's error names its sentinel too ("bad request: …"): once is enough.
			text := strings.TrimLeft(strings.TrimPrefix(*errField, sentinel.Error()), ": ")
			return msg.Header, fmt.Errorf("%w: %w: %s: %s", ErrRemote, sentinel, subject, text)
		}
		return msg.Header, fmt.Errorf("%w: %s: %s", ErrRemote, subject, *errField)
	}
	return msg.Header, nil
}

// bounded is ctx bounded by the client's timeout when it has no deadline.
func (c *Client) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.timeout)
}

func toIDs(ids []uint64) []pipeline.ID {
	out := make([]pipeline.ID, len(ids))
	for i, id := range ids {
		out[i] = pipeline.ID(id)
	}
	return out
}

// Get returns the counters of ids, in the order asked (unknown ids are zeros).
//
// While a partition is being handed over between tallyd processes, its ids may be
// unavailable: the reply then lists them in Unavailable (in the order asked) and their
// Counts entries are nil, never zeros; every other id is counted as usual and err is nil.
// Check len(r.Unavailable) before reading Counts, and ask again for those ids shortly. When
// no partition could answer, err wraps ErrRemote instead.
//
// While a partition has no owner at all (its tallyd was killed, until its standby takes
// it over), its ids are counted by its standby, a moment behind: r.Stale lists them with
// how far behind (tallyd 1.2). GetWith with Exact refuses those counts.
func (c *Client) Get(ctx context.Context, family string, ids ...uint64) (*pipeline.GetReply, error) {
	return c.GetWith(ctx, family, ids)
}

// GetOption changes what a get asks.
type GetOption func(*pipeline.GetRequest) error

// Exact asks for exact counts only: ids whose partition has no owner are listed in
// Unavailable rather than counted by its standby (Stale). A tallyd before protocol 1.2
// refuses the request (ErrBadRequest).
func Exact() GetOption {
	return func(r *pipeline.GetRequest) error { r.Exact = true; return nil }
}

// GetWith is Get with options.
func (c *Client) GetWith(ctx context.Context, family string, ids []uint64, opts ...GetOption) (*pipeline.GetReply, error) {
	req := pipeline.GetRequest{IDs: toIDs(ids)}
	for _, o := range opts {
		if err := o(&req); err != nil {
			return nil, err
		}
	}
	return c.get(ctx, family, req)
}

// GetWindow returns the net change of the counters of ids over the last window ("5m",
// "1h" or "1d"; any other is ErrBadRequest), in the order asked: r.Changes[i][f] is what
// the events of the window's minutes added to field f of ids[i] (an unlike counts -1 at
// its own minute), and r.Window names the window answered. Unavailable ids are as for
// Get, their Changes entries nil. It needs tallyd 1.2 with --windows.
func (c *Client) GetWindow(ctx context.Context, family, window string, ids ...uint64) (*pipeline.GetReply, error) {
	if _, err := pipeline.ParseWindow(window); err != nil {
		return nil, err
	}
	var r pipeline.GetReply
	err := c.request(ctx, c.subj.Get(family), pipeline.GetRequest{IDs: toIDs(ids), Window: window}, &r, &r.Error, &r.Code)
	return &r, err
}

// Top returns the limit ids of family (100 when 0) whose field changed the most over
// window ("5m", "1h" or "1d"), best first, exact: trending (tallyd 1.5 with windows).
func (c *Client) Top(ctx context.Context, family, field, window string, limit int) (*pipeline.TopReply, error) {
	if _, err := pipeline.ParseWindow(window); err != nil {
		return nil, err
	}
	var r pipeline.TopReply
	err := c.request(ctx, c.subj.Top(family), pipeline.TopRequest{Field: field, Window: window, Limit: limit}, &r, &r.Error, &r.Code)
	return &r, err
}

// Liked reports whether uid liked each of posts.
func (c *Client) Liked(ctx context.Context, uid uint64, posts ...uint64) ([]bool, error) {
	var r pipeline.LikedReply
	err := c.request(ctx, c.subj.Liked(), pipeline.LikedRequest{UID: pipeline.ID(uid), Posts: toIDs(posts)}, &r, &r.Error, &r.Code)
	return r.Liked, err
}

// Page is one page of a relation list, newest first.
type Page struct {
	IDs  []uint64
	TS   []int64
	Next string // cursor of the next page; "" on the last
}

// List kinds for Client.List.
const (
	LikesOfUser = "likes.user" // posts a user liked
	LikesOfPost = "likes.post" // users who liked a post
	Following   = "following"  // whom a user follows
	Followers   = "followers"  // who follows a user
)

// List returns one page of a relation list of id; before is the previous page's Next.
func (c *Client) List(ctx context.Context, list string, id uint64, limit int, before string) (*Page, error) {
	req := pipeline.ListRequest{Limit: limit, Before: before}
	subject := c.subj.Prefix + "." + list
	switch list {
	case LikesOfPost:
		req.Post = pipeline.ID(id)
	case LikesOfUser, Following, Followers:
		req.UID = pipeline.ID(id)
	default:
		return nil, fmt.Errorf("%w: unknown list %q", ErrBadRequest, list)
	}
	var r struct {
		IDs   []pipeline.ID `json:"ids"`
		TS    []int64       `json:"ts"`
		Next  string        `json:"next"`
		Error string        `json:"error"`
		Code  string        `json:"code"`
	}
	if err := c.request(ctx, subject, req, &r, &r.Error, &r.Code); err != nil {
		return nil, err
	}
	p := &Page{IDs: make([]uint64, len(r.IDs)), TS: r.TS, Next: r.Next}
	for i, id := range r.IDs {
		p.IDs[i] = uint64(id)
	}
	return p, nil
}

// Unread returns a user's unread counts.
func (c *Client) Unread(ctx context.Context, uid uint64) (pipeline.Unread, error) {
	var r pipeline.UnreadReply
	err := c.request(ctx, c.subj.Unread(), pipeline.UnreadRequest{UID: pipeline.ID(uid)}, &r, &r.Error, &r.Code)
	return r.Unread, err
}

// UnreadMany returns the unread counts of many users in one request, in the order asked.
func (c *Client) UnreadMany(ctx context.Context, uids ...uint64) ([]pipeline.Unread, error) {
	var r pipeline.UnreadReply
	err := c.request(ctx, c.subj.Unread(), pipeline.UnreadRequest{UIDs: toIDs(uids)}, &r, &r.Error, &r.Code)
	return r.Users, err
}

// Health asks whether every partition has caught up.
func (c *Client) Health(ctx context.Context) (*pipeline.HealthReply, error) {
	var r pipeline.HealthReply
	err := c.request(ctx, c.subj.Health(), struct{}{}, &r, &r.Error, &r.Code)
	return &r, err
}

// WatchTop yields family's top (as Top asks it) at once and then each time it changes,
// until ctx ends (which is no error) or the caller stops: the change stream of a
// trending list for a gateway to push. The top is pushed (tallyd 1.6): the watch
// request has the server publish it whole on Subjects.TopChanges each time a flush
// changes it, and WatchTop asks again every interval (10 s when 0, at most
// pipeline.TopWatchFor) to keep it watched, which also makes up for a message lost on
// the way. A failed ask, or a message that cannot be read, is yielded as an error and
// the watch goes on if the caller goes on; an unchanged top is not yielded again.
//
//	for top, err := range c.WatchTop(ctx, "post", "like", "1h", 10, 0) {
//		if err != nil { log(err); continue }
//		push(top.IDs, top.Changes)
//	}
func (c *Client) WatchTop(ctx context.Context, family, field, window string, limit int, interval time.Duration) iter.Seq2[*pipeline.TopReply, error] {
	if interval <= 0 {
		interval = 10 * time.Second
	}
	interval = min(interval, pipeline.TopWatchFor/2)
	return func(yield func(*pipeline.TopReply, error) bool) {
		if _, err := pipeline.ParseWindow(window); err != nil {
			yield(nil, err)
			return
		}
		// Subscribed before the first watch request, so no change after it is missed.
		pushed := make(chan *nats.Msg, 64)
		sub, err := c.nc.ChanSubscribe(c.subj.TopChanges(family, field, window, cmp.Or(limit, pipeline.DefaultTop)), pushed)
		if err != nil {
			yield(nil, fmt.Errorf("cannot watch a top: %w", err))
			return
		}
		defer func() { _ = sub.Unsubscribe() }()
		var last *pipeline.TopReply
		next := func(top *pipeline.TopReply, err error) bool {
			switch {
			case ctx.Err() != nil:
				return false
			case err != nil:
				return yield(nil, err)
			case last != nil && slices.Equal(top.IDs, last.IDs) && slices.Equal(top.Changes, last.Changes):
				return true
			}
			last = top
			return yield(top, nil)
		}
		watch := func() bool {
			var r pipeline.TopReply
			err := c.request(ctx, c.subj.Top(family), pipeline.TopRequest{Field: field, Window: window, Limit: limit, Watch: true}, &r, &r.Error, &r.Code)
			return next(&r, err)
		}
		if !watch() {
			return
		}
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if !watch() {
					return
				}
			case m := <-pushed:
				var r pipeline.TopReply
				err := pipeline.UnmarshalReply(m.Data, pipeline.IsJSON(m.Data, m.Header), &r)
				if err != nil {
					err = fmt.Errorf("%s: cannot decode a watched top: %w", m.Subject, err)
				}
				if !next(&r, err) {
					return
				}
			}
		}
	}
}
