package client

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/pipeline"
)

// A get asks the tallyd processes that serve its ids' partitions itself (protocol 1.9,
// pipeline.WhereHeader). A get on <prefix>.get.<family> reaches any tallyd, which asks
// the owners of the partitions it does not serve: two round trips in a row for the ids
// of another process's partitions. So a get that does not know where a family's
// partitions are served asks that of the tallyd answering it, and the next gets split
// their ids by the process serving each partition and ask each process on its own
// subject, all at once (<prefix>.get.<family>.at.<token>). What the client learned is
// only ever a shortcut: ids a process asked so does not answer (a partition handed over
// since, a process gone or silent) are asked on <prefix>.get.<family> as before, within
// the same get, and the client learns again.

// directPatience bounds how long a get waits for a process asked for its partitions'
// ids (a healthy one answers within a millisecond or so): the ids of one that does not
// answer, or has no responders, are asked on the family's subject, within what is left
// of the get's time, and that process is not asked directly again for directQuiet.
const directPatience = 250 * time.Millisecond

// directQuiet is how long a process that did not answer within directPatience, or had
// no responders, is not asked directly.
const directQuiet = 30 * time.Second

// where is what the client learned of where each family's partitions are served.
type where struct {
	of     sync.Map // family → *pipeline.Where, never changed once stored
	silent pipeline.Silences
}

// at is where the partitions of family are served, as last learned (nil when not known).
func (w *where) at(family string) *pipeline.Where {
	if v, ok := w.of.Load(family); ok {
		return v.(*pipeline.Where)
	}
	return nil
}

// learn records where the partitions of family are served from the header of a get's
// reply; a token of a process hushed, or a header that cannot be read, is not learned.
func (w *where) learn(family string, hdr nats.Header) {
	v := hdr.Get(pipeline.WhereHeader)
	if v == "" {
		return // a tallyd before 1.9: every get is asked on the family's subject
	}
	at, err := pipeline.ParseWhere(v)
	if err != nil {
		return
	}
	for p, tok := range at.At {
		if tok != "" && w.silent.Quiet(tok) {
			at.At[p] = ""
		}
	}
	w.of.Store(family, &at)
}

// forget drops what was learned of family: a process asked directly did not answer
// every id, so where its partitions are served has changed.
func (w *where) forget(family string) { w.of.Delete(family) }

// hush forgets family and does not ask the process of token directly for directQuiet.
func (w *where) hush(family, token string) {
	w.silent.Hush(token, directQuiet)
	w.forget(family)
}

// get asks for the counters of req's ids: of the processes serving their partitions
// when the client knows them (split), else on the family's subject, learning where
// they are served.
func (c *Client) get(ctx context.Context, family string, req pipeline.GetRequest) (*pipeline.GetReply, error) {
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	if at := c.where.at(family); at != nil && c.direct && len(req.IDs) > 0 && len(req.IDs) <= pipeline.MaxQueryIDs {
		return c.split(ctx, family, at, req)
	}
	return c.getAny(ctx, family, req)
}

// getAny asks a get on the family's subject, asking where its partitions are served.
func (c *Client) getAny(ctx context.Context, family string, req pipeline.GetRequest) (*pipeline.GetReply, error) {
	var r pipeline.GetReply
	var hdr nats.Header
	if c.direct {
		hdr = nats.Header{pipeline.WhereHeader: []string{"1"}}
	}
	hdr, err := c.ask(ctx, c.subj.Get(family), hdr, req, &r, &r.Error, &r.Code)
	if err == nil && c.direct {
		c.where.learn(family, hdr)
	}
	return &r, err
}

// getPart is the ids of a get asked of one process (token), or on the family's
// subject (token "").
type getPart struct {
	token string
	at    []int // each id's place in the get
	req   pipeline.GetRequest
	reply *pipeline.GetReply
	err   error
}

// split asks the ids of req of the processes serving their partitions as at says, each
// process once and all at once, and the ids of partitions where no process is known on
// the family's subject; then the ids that a process did not answer on the family's
// subject, in one more request. The reply is as one request's: counts in the order
// asked, unavailable ids in the order asked, stale groups by their first id asked.
func (c *Client) split(ctx context.Context, family string, at *pipeline.Where, req pipeline.GetRequest) (*pipeline.GetReply, error) {
	tokenOf := func(id pipeline.ID) string { return at.At[pipeline.PartitionOf(id, len(at.At))] }
	if first := tokenOf(req.IDs[0]); !slices.ContainsFunc(req.IDs, func(id pipeline.ID) bool { return tokenOf(id) != first }) {
		if first == "" {
			return c.getAny(ctx, family, req)
		}
		// One process's partitions: the get itself, asked of it.
		r, err := c.askPart(ctx, family, first, req)
		if err == nil && len(r.Counts) == len(req.IDs) && !slices.ContainsFunc(r.Counts, func(c []uint64) bool { return c == nil }) {
			return r, nil
		}
		c.missed(ctx, family, first, err)
		return c.getAny(ctx, family, req)
	}
	// Each part's ids, in the order asked, are runs of two arrays (as the query
	// service's gather cuts a get by partition).
	of := make([]int, len(req.IDs)) // each id's part
	var parts []getPart
	for i, id := range req.IDs {
		tok := tokenOf(id)
		k := slices.IndexFunc(parts, func(p getPart) bool { return p.token == tok })
		if k < 0 {
			k = len(parts)
			parts = append(parts, getPart{token: tok, req: pipeline.GetRequest{Exact: req.Exact}})
		}
		of[i] = k
	}
	sizes := make([]int, len(parts))
	for _, k := range of {
		sizes[k]++
	}
	ats, ids := make([]int, 0, len(req.IDs)), make([]pipeline.ID, 0, len(req.IDs))
	for k, n := range sizes {
		parts[k].at, parts[k].req.IDs = ats[len(ats):len(ats):len(ats)+n], ids[len(ids):len(ids):len(ids)+n]
		ats, ids = ats[:len(ats)+n], ids[:len(ids)+n]
	}
	for i, k := range of {
		parts[k].at, parts[k].req.IDs = append(parts[k].at, i), append(parts[k].req.IDs, req.IDs[i])
	}
	var wg sync.WaitGroup
	for k := range parts {
		ask := func() { parts[k].reply, parts[k].err = c.askPart(ctx, family, parts[k].token, parts[k].req) }
		if k == len(parts)-1 {
			ask() // the last on this goroutine
		} else {
			wg.Go(ask)
		}
	}
	wg.Wait()
	m := merged{ids: req.IDs, counts: make([][]uint64, len(req.IDs))}
	var again getPart // the ids no process asked directly answered
	for k := range parts {
		p := &parts[k]
		if p.token == "" {
			if err := m.add(p); err != nil {
				return p.reply, err
			}
			continue
		}
		missed := p.err != nil || len(p.reply.Counts) != len(p.at)
		n := len(again.at)
		for j, i := range p.at {
			if missed || p.reply.Counts[j] == nil || len(p.reply.Counts[j]) != len(p.reply.Fields) {
				again.at, again.req.IDs = append(again.at, i), append(again.req.IDs, req.IDs[i])
				continue
			}
			m.counts[i] = p.reply.Counts[j]
			m.fieldsOf(p.reply)
		}
		if len(again.at) > n {
			c.missed(ctx, family, p.token, p.err)
		}
	}
	if len(again.at) > 0 {
		again.req.Exact = req.Exact
		again.reply, again.err = c.getAny(ctx, family, again.req)
		if err := m.add(&again); err != nil {
			return again.reply, err
		}
	}
	return m.reply()
}

// missed records that the process of token did not answer every id asked of it (err
// when it answered none): one silent (paused, or hung: the request timed out within the
// get's time) or with no responders (gone, or not allowed to subscribe to its subject:
// a tallyd whose user lacks the permission would be named again by every get's reply)
// is hushed, and where the family's partitions are served is learned again.
func (c *Client) missed(ctx context.Context, family, token string, err error) {
	if errors.Is(err, nats.ErrNoResponders) || (errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil) {
		c.where.hush(family, token)
		return
	}
	c.where.forget(family)
}

// askPart asks req's ids of the process of token within directPatience, or on the
// family's subject when token is "".
func (c *Client) askPart(ctx context.Context, family, token string, req pipeline.GetRequest) (*pipeline.GetReply, error) {
	if token == "" {
		return c.getAny(ctx, family, req)
	}
	pctx, cancel := context.WithTimeout(ctx, directPatience)
	defer cancel()
	var r pipeline.GetReply
	_, err := c.ask(pctx, c.subj.GetAt(family, token), nil, req, &r, &r.Error, &r.Code)
	return &r, err
}

// merged is the reply of a split get, gathered from its parts'.
type merged struct {
	ids         []pipeline.ID
	counts      [][]uint64
	fields, est []string
	stale       []pipeline.Stale
	unavailErr  error // why the family's subject answered no id of a part
}

// fieldsOf takes the fields a reply names, from the first that answered.
func (m *merged) fieldsOf(r *pipeline.GetReply) {
	if m.fields == nil {
		m.fields, m.est = r.Fields, r.Estimated
	}
}

// add takes the reply of a part asked on the family's subject: its counts, its stale
// groups placed in the whole get, its unavailable ids (nil counts). A failure that says
// no partition could answer leaves its ids unavailable; any other is the get's.
func (m *merged) add(p *getPart) error {
	if p.err != nil {
		if !errors.Is(p.err, ErrUnavailable) {
			return p.err
		}
		m.unavailErr = p.err
		return nil
	}
	m.fieldsOf(p.reply)
	for j, i := range p.at {
		if j < len(p.reply.Counts) {
			m.counts[i] = p.reply.Counts[j]
		}
	}
	for _, st := range p.reply.Stale {
		at := make([]int, 0, len(st.At))
		for _, j := range st.At {
			if j >= 0 && j < len(p.at) {
				at = append(at, p.at[j])
			}
		}
		st.At = at
		m.stale = append(m.stale, st)
	}
	return nil
}

// reply is the whole get's reply; when no id could be counted, the error of the family's
// subject that said so.
func (m *merged) reply() (*pipeline.GetReply, error) {
	r := &pipeline.GetReply{Fields: m.fields, Estimated: m.est, Counts: m.counts}
	for i, c := range m.counts {
		if c == nil {
			r.Unavailable = append(r.Unavailable, m.ids[i])
		}
	}
	if len(r.Unavailable) == len(m.ids) && m.unavailErr != nil {
		return &pipeline.GetReply{Error: m.unavailErr.Error(), Code: pipeline.CodeUnavailable}, m.unavailErr
	}
	slices.SortStableFunc(m.stale, func(a, b pipeline.Stale) int {
		return cmp.Compare(firstOr(a.At), firstOr(b.At))
	})
	r.Stale = m.stale
	return r, nil
}

func firstOr(at []int) int {
	if len(at) == 0 {
		return -1
	}
	return at[0]
}
