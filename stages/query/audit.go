package query

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/store/graph"
)

// An audit recounts counters from the relations they are made of and compares the two
// at a consistent point. The relations live with the event partitions, each in its
// owner's Badger, so sampling and recounting gather every partition's share (asked of
// its owner, see events.go) and any process answers <prefix>.audit; the counters are
// read by a normal get.
//
// A count in flight is not drift: a like committed by a stage reaches its counter a
// moment later, and a follow reaches the followed user's follower list only when the hop
// carrying it is applied in that user's partition, which may lag by seconds. So each
// attempt reads the relations (R1), waits until every event stage has published what it
// had committed, the ids' counter partitions have applied those deltas, and the users'
// partitions have applied the hops sent to them by then (then the counters and the
// relations both include everything R1 saw; see settle, which needs no idle moment, so
// that an audit works under load), reads the counters (C) and the relations again (R2).
// An id whose partitions did not get there is read again in the next attempt; one whose
// R1 and R2 differ is moving; one whose counters equal R is exact; one that differs is
// drift only when the next attempt finds the very same pair of values — a like and its
// unlike between R1 and R2, or a follow committed after the settle began, could make one
// attempt look wrong, not two in a row. What stays unsettled after the last attempt is
// skipped, with the reason, never reported as drift, never repaired.

// Audit tuning: bounds, not estimates — an audit that cannot settle skips rather than
// waiting longer.
const (
	// auditTimeout bounds one audit, repairs included (the CLI waits a little longer).
	auditTimeout = 20 * time.Second
	// auditAttempts is how many times an id is read before it is skipped.
	auditAttempts = 5
	// settleWait is how long one attempt waits for the partitions to catch up.
	settleWait = 3 * time.Second
	// settlePoll is how often a settling attempt looks at the lags again.
	settlePoll = 10 * time.Millisecond
)

// Why an id was skipped.
const (
	skipMoving      = "its relations changed while it was read (a count in flight)"
	skipUnconfirmed = "its counter differed once but not the same way twice (a count in flight)"
	skipLagging     = "its partitions did not catch up"
	skipInFlight    = "a follow or unfollow of it is in flight: its partition has not applied every hop sent to it yet (a count in flight)"
	skipUnavailable = "its counter partition is unavailable (hand-over?)"
)

// auditState is what audits share in one server: repairs are serialised, so that a
// second audit sees the first one's repair applied rather than repairing again.
type auditState struct {
	once sync.Once
	turn chan struct{} // holds a token while an audit repairs
	js   jetstream.JetStream
	err  error // of making js
}

func (a *auditState) init(nc *nats.Conn) {
	a.once.Do(func() {
		a.turn = make(chan struct{}, 1)
		a.js, a.err = jetstream.New(nc)
	})
}

// jetStream is the handle repairs publish with and settling reads positions with.
func (s *Server) jetStream() (jetstream.JetStream, error) {
	s.auditing.init(s.nc)
	return s.auditing.js, s.auditing.err
}

// lock waits for the turn to repair, or for ctx to end.
func (a *auditState) lock(ctx context.Context) error {
	select {
	case a.turn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: another audit was repairing until the deadline: %w", errUnavailable, ctx.Err())
	}
}

func (a *auditState) unlock() { <-a.turn }

// audited is one family's share of an audit: the ids and the recounted fields.
type audited struct {
	fam    pipeline.Family
	fields []string // recounted fields, in the order recount returns them
	index  []int    // their index in fam.Fields
	ids    []pipeline.ID
}

// recount returns, per id in the order of a.ids, the value of each recounted field.
func (a *audited) recount(rc graph.Recount) [][]uint64 {
	out := make([][]uint64, len(a.ids))
	for i := range a.ids {
		if a.fam.Name == pipeline.FamilyPost {
			out[i] = []uint64{rc.Likes[i], rc.Comments[i]}
		} else {
			out[i] = []uint64{rc.Followers[i], rc.Following[i]}
		}
	}
	return out
}

func (s *Server) audit(r *request) (any, error) {
	var req pipeline.AuditRequest
	if err := r.decode(&req); err != nil {
		return nil, err
	}
	// An audit outlives the usual query timeout: it waits for partitions to settle.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), auditTimeout)
	defer cancel()
	return s.Audit(ctx, req)
}

// Audit recounts and compares the posts and users of req (see the comment at the top of
// this file) and, with req.Repair, corrects each drift with an incr event. Every event
// partition must answer, here or in its owner (otherwise errUnavailable); without a
// deadline in ctx it takes auditTimeout. Every audit is reported to Config.OnAudit.
func (s *Server) Audit(ctx context.Context, req pipeline.AuditRequest) (*pipeline.AuditReply, error) {
	if _, ok := ctx.Deadline(); !ok { // a request to another process needs one
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, auditTimeout)
		defer cancel()
	}
	if len(req.Posts) > pipeline.MaxQueryIDs || len(req.Users) > pipeline.MaxQueryIDs {
		return nil, fmt.Errorf("%w: at most %d posts and %d users per audit", pipeline.ErrBadRequest, pipeline.MaxQueryIDs, pipeline.MaxQueryIDs)
	}
	if req.Sample < 0 || req.Sample > pipeline.MaxAuditSample {
		return nil, fmt.Errorf("%w: sample %d out of range 0..%d", pipeline.ErrBadRequest, req.Sample, pipeline.MaxAuditSample)
	}
	if len(req.Posts) == 0 && len(req.Users) == 0 && req.Sample == 0 {
		return nil, fmt.Errorf("%w: give posts, users or a sample size", pipeline.ErrBadRequest)
	}
	posts, users, err := s.auditIDs(ctx, req)
	if err != nil {
		return nil, err
	}
	var groups []*audited
	for _, g := range []struct {
		family string
		fields []string
		ids    []pipeline.ID
	}{{pipeline.FamilyPost, []string{"like", "comment"}, posts}, {pipeline.FamilyUser, []string{"follower", "following"}, users}} {
		if len(g.ids) == 0 {
			continue
		}
		a, err := s.auditedFamily(g.family, g.fields, g.ids)
		if err != nil {
			return nil, err
		}
		groups = append(groups, a)
	}
	if req.Repair { // one repairing audit at a time (see auditState)
		s.auditing.init(s.nc)
		if err := s.auditing.lock(ctx); err != nil {
			return nil, err
		}
		defer s.auditing.unlock()
	}
	reply := &pipeline.AuditReply{Posts: posts, Users: users}
	if err := s.compare(ctx, groups, reply); err != nil {
		return nil, err
	}
	if req.Repair && len(reply.Drift) > 0 {
		if err := s.repair(ctx, groups, reply); err != nil {
			return nil, err
		}
	}
	if s.cfg.OnAudit != nil {
		s.cfg.OnAudit(reply.Checked, len(reply.Drift))
	}
	return reply, nil
}

// auditIDs returns the posts and users to audit: those asked, then the sampled ones not
// asked already. Every partition offers up to req.Sample ids of each kind (see sample);
// of them all, req.Sample posts are picked at random, and req.Sample users: half of them
// followed, the rest following.
func (s *Server) auditIDs(ctx context.Context, req pipeline.AuditRequest) (posts, users []pipeline.ID, err error) {
	posts, users = slices.Clone(req.Posts), slices.Clone(req.Users)
	if req.Sample == 0 {
		return posts, users, nil
	}
	samples, err := s.gather(ctx, s.allParts(), evSample, func(int) *evRequest { return &evRequest{Limit: req.Sample} })
	if err != nil {
		return nil, nil, fmt.Errorf("cannot sample: %w", err)
	}
	var liked, followed, following []uint64
	for _, r := range samples {
		liked, followed, following = append(liked, r.Posts...), append(followed, r.Followed...), append(following, r.Following...)
	}
	// add adds up to n of ids, in random order, not in to already.
	add := func(to []pipeline.ID, ids []uint64, n int) ([]pipeline.ID, int) {
		rand.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
		added := 0
		for _, id := range ids {
			if added < n && !slices.Contains(to, pipeline.ID(id)) {
				to, added = append(to, pipeline.ID(id)), added+1
			}
		}
		return to, added
	}
	posts, _ = add(posts, liked, req.Sample)
	users, n := add(users, followed, (req.Sample+1)/2)
	users, _ = add(users, following, req.Sample-n)
	return posts, users, nil
}

func (s *Server) auditedFamily(family string, fields []string, ids []pipeline.ID) (*audited, error) {
	fam, err := s.cfg.Families.Lookup(family)
	if err != nil {
		return nil, fmt.Errorf("cannot audit: %w", err)
	}
	a := &audited{fam: fam, fields: fields, ids: ids}
	for _, f := range fields {
		i, err := fam.Field(f)
		if err != nil {
			return nil, fmt.Errorf("cannot audit: %w", err)
		}
		a.index = append(a.index, i)
	}
	return a, nil
}

// observation is what one attempt saw of an id: counters and recount, field by field.
type observation struct{ counter, relations [2]uint64 }

// compare runs the attempts and fills reply's Checked, Drift and Skipped.
func (s *Server) compare(ctx context.Context, groups []*audited, reply *pipeline.AuditReply) error {
	type unit struct {
		id   pipeline.ID
		seen *observation // what the previous attempt saw, when it differed
		why  string       // why it is still pending
	}
	type batch struct {
		g     *audited // the group, with only the pending ids
		units []*unit
	}
	var batches []*batch
	for _, g := range groups {
		b := &batch{g: g}
		for _, id := range g.ids {
			b.units = append(b.units, &unit{id: id, why: "the audit ran out of time"})
		}
		batches = append(batches, b)
	}
	for attempt := 0; attempt < auditAttempts && len(batches) > 0 && ctx.Err() == nil; attempt++ {
		subs := make([]*audited, len(batches))
		for k, b := range batches {
			c := *b.g
			c.ids = make([]pipeline.ID, len(b.units))
			for j, u := range b.units {
				c.ids[j] = u.id
			}
			subs[k] = &c
		}
		r1, err := s.recount(ctx, subs)
		if err != nil {
			return err
		}
		why, err := s.settle(ctx, subs)
		if err != nil {
			return err
		}
		if ctx.Err() != nil { // no time left to read: an id not settled says why
			for k, b := range batches {
				for j, u := range b.units {
					if why[k][j] != "" {
						u.why = why[k][j]
					}
				}
			}
			break
		}
		var next []*batch
		for k, b := range batches {
			g := subs[k]
			var counts [][]uint64
			var r2 [][][]uint64
			if slices.Contains(why[k], "") { // some ids settled: read them
				if counts, _, _, err = s.counts(ctx, g.fam, g.ids, true); errors.Is(err, errUnavailable) { // a repair compares exact counts only
					counts = make([][]uint64, len(g.ids)) // no partition answered: every id unavailable
				} else if err != nil {
					return err
				}
				if r2, err = s.recount(ctx, []*audited{g}); err != nil {
					return err
				}
			}
			left := &batch{g: b.g}
			for j, u := range b.units {
				if why[k][j] != "" { // read again, what it saw forgotten: "in a row" is of settled attempts
					u.why, u.seen = why[k][j], nil
					left.units = append(left.units, u)
					continue
				}
				if counts[j] == nil {
					u.why, u.seen = skipUnavailable, nil
					left.units = append(left.units, u)
					continue
				}
				var o observation
				moving := false
				for f, fi := range g.index {
					o.counter[f], o.relations[f] = counts[j][fi], r1[k][j][f]
					moving = moving || r2[0][j][f] != o.relations[f]
				}
				switch {
				case moving:
					u.why, u.seen = skipMoving, nil
					left.units = append(left.units, u)
				case o.counter == o.relations:
					reply.Checked += len(g.fields)
				case u.seen != nil && *u.seen == o: // the same difference twice in a row: drift
					reply.Checked += len(g.fields)
					for f, name := range g.fields {
						if o.counter[f] != o.relations[f] {
							reply.Drift = append(reply.Drift, pipeline.Drift{Family: g.fam.Name, ID: u.id, Field: name,
								Counter: o.counter[f], Relations: o.relations[f]})
						}
					}
				default:
					u.why, u.seen = skipUnconfirmed, &o
					left.units = append(left.units, u)
				}
			}
			if len(left.units) > 0 {
				next = append(next, left)
			}
		}
		batches = next
	}
	for _, b := range batches {
		for _, u := range b.units {
			reply.Skipped = append(reply.Skipped, pipeline.Skipped{Family: b.g.fam.Name, ID: u.id, Reason: u.why})
		}
	}
	return nil
}

// recount reads the relations of every group's ids, gathering every event partition's
// share: each counts in one read transaction, the partitions not at the same instant,
// which the attempts of compare allow for.
func (s *Server) recount(ctx context.Context, groups []*audited) ([][][]uint64, error) {
	var posts, users []uint64
	for _, g := range groups {
		for _, id := range g.ids {
			if g.fam.Name == pipeline.FamilyPost {
				posts = append(posts, uint64(id))
			} else {
				users = append(users, uint64(id))
			}
		}
	}
	shares, err := s.gather(ctx, s.allParts(), evRecount, func(int) *evRequest { return &evRequest{IDs: posts, Users: users} })
	if err != nil {
		return nil, fmt.Errorf("cannot recount the relations: %w", err)
	}
	rc := graph.Recount{Likes: make([]uint64, len(posts)), Comments: make([]uint64, len(posts)),
		Followers: make([]uint64, len(users)), Following: make([]uint64, len(users))}
	for p, sh := range shares {
		r := sh.Recount
		if r == nil || len(r.Likes) != len(posts) || len(r.Comments) != len(posts) || len(r.Followers) != len(users) || len(r.Following) != len(users) {
			return nil, fmt.Errorf("cannot recount the relations: event partition %d answered another number of ids", p)
		}
		for i := range posts {
			rc.Likes[i] += r.Likes[i]
			rc.Comments[i] += r.Comments[i]
		}
		for i := range users {
			rc.Followers[i] += r.Followers[i]
			rc.Following[i] += r.Following[i]
		}
	}
	out := make([][][]uint64, len(groups))
	for k, g := range groups {
		out[k] = g.recount(rc)
	}
	return out, nil
}

// repair publishes an incr event of the difference for each drift, under the drift's
// own message id (pipeline.RepairMsgID), and waits until the counters have applied
// them, so that the next audit sees them. Called in its turn (s.auditing.lock).
func (s *Server) repair(ctx context.Context, groups []*audited, reply *pipeline.AuditReply) error {
	js, err := s.jetStream()
	if err != nil {
		return err
	}
	var failed []string
	for i := range reply.Drift {
		d := &reply.Drift[i]
		n := int64(d.Relations) - int64(d.Counter)
		if n > pipeline.MaxViewN || n < -pipeline.MaxViewN {
			failed = append(failed, fmt.Sprintf("%s %d %s: a difference of %d is beyond one incr", d.Family, d.ID, d.Field, n))
			continue
		}
		tx := pipeline.RepairMsgID(d.Family, d.ID, d.Field, d.Counter, d.Relations)
		e := pipeline.Event{Type: pipeline.TypeIncr, Family: d.Family, ID: d.ID, Field: d.Field, N: n, Tx: tx}
		data, err := pipeline.Marshal(&e, false)
		if err != nil {
			return err
		}
		// A duplicate ack means the same repair was stored already: repaired, once.
		if _, err := js.Publish(ctx, s.cfg.Subjects.Event(e.Type, e.Key()), data, jetstream.WithMsgID(tx)); err != nil {
			failed = append(failed, fmt.Sprintf("%s %d %s: %v", d.Family, d.ID, d.Field, err))
			continue
		}
		d.Repaired, d.Tx = true, tx
		s.log.Info("audit repaired a drift", "family", d.Family, "id", d.ID, "field", d.Field, "counter", d.Counter, "relations", d.Relations, "tx", tx)
	}
	if len(failed) > 0 {
		s.log.Warn("audit could not repair every drift", "failed", strings.Join(failed, "; "))
	}
	if _, err := s.settle(ctx, groups); err != nil {
		return err
	}
	return nil
}
