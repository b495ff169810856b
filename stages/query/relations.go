package query

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/graph"
	"github.com/tally-dev/tally/store/unread"
)

// The relation queries. Where their state is, for a user u of partition pu: what u liked
// and whom u follows, and who follows u, are in pu; the likes of a post are in each
// liker's partition, so a page of them is gathered from every partition; u's unread
// state other than counters is in pu (see events.go for how a partition is asked).

func (s *Server) partOf(id uint64) int {
	return pipeline.PartitionOf(pipeline.ID(id), s.cfg.Partitions)
}

func (s *Server) liked(r *request) (any, error) {
	var req pipeline.LikedRequest
	if err := r.decode(&req); err != nil {
		return nil, err
	}
	if req.UID == 0 {
		return nil, fmt.Errorf("%w: uid is missing", pipeline.ErrBadRequest)
	}
	if len(req.Posts) == 0 || len(req.Posts) > pipeline.MaxQueryIDs {
		return nil, fmt.Errorf("%w: posts must hold 1 to %d ids, not %d", pipeline.ErrBadRequest, pipeline.MaxQueryIDs, len(req.Posts))
	}
	posts := make([]uint64, len(req.Posts))
	for i, p := range req.Posts {
		posts[i] = uint64(p)
	}
	uid := uint64(req.UID)
	reply, err := s.ev(r.ctx, s.partOf(uid), evLiked, &evRequest{ID: uid, IDs: posts})
	if err != nil {
		return nil, err
	}
	if len(reply.Liked) != len(posts) {
		return nil, fmt.Errorf("the partition of uid %d answered %d posts of %d", uid, len(reply.Liked), len(posts))
	}
	return pipeline.LikedReply{Liked: reply.Liked}, nil
}

// quotedID matches a JSON request that gave its uid or post as a string.
var quotedID = regexp.MustCompile(`"(uid|post)"\s*:\s*"`)

// list answers a newest-first page of one kind of relation, keyed by uid or post.
func (s *Server) list(k graph.Kind, bySubject bool, keyName string) func(*request) (any, error) {
	return func(r *request) (any, error) {
		var req pipeline.ListRequest
		if err := r.decode(&req); err != nil {
			return nil, err
		}
		id := req.UID
		if keyName == "post" {
			id = req.Post
		}
		if id == 0 {
			return nil, fmt.Errorf("%w: %s is missing", pipeline.ErrBadRequest, keyName)
		}
		if req.Limit == 0 {
			req.Limit = 20
		}
		if req.Limit < 0 || req.Limit > pipeline.MaxPage {
			return nil, fmt.Errorf("%w: limit %d out of range 1..%d", pipeline.ErrBadRequest, req.Limit, pipeline.MaxPage)
		}
		ask := &evRequest{ID: uint64(id), Kind: byte(k), BySubject: bySubject, Limit: req.Limit, Before: req.Before}
		var page *evReply
		var err error
		if bySubject || k == graph.Follow {
			page, err = s.ev(r.ctx, s.partOf(uint64(id)), evList, ask)
		} else { // the likes of a post: each liker's partition keeps theirs
			var pages []*evReply
			if pages, err = s.gather(r.ctx, s.allParts(), evList, func(int) *evRequest { return ask }); err == nil {
				page = mergePages(pages, req.Limit)
			}
		}
		if err != nil {
			return nil, err
		}
		asString := r.asJSON && quotedID.Match(r.msg.Data)
		reply := pipeline.ListReply{IDs: make([]any, len(page.Items)), TS: make([]int64, len(page.Items)), Next: page.Next}
		for i, it := range page.Items {
			reply.IDs[i] = it.ID
			if asString {
				reply.IDs[i] = pipeline.ID(it.ID).String()
			}
			reply.TS[i] = it.TS
		}
		return reply, nil
	}
}

// mergePages merges pages of several partitions, each newest first after the same
// cursor, into the first limit items of them all. Cursors compare alike in every
// partition (graph.Item.Cursor) and no two partitions hold the same entry, so the next
// page starts after the last item kept; there is one whenever an item was left out or a
// partition had more.
func mergePages(pages []*evReply, limit int) *evReply {
	var items []evItem
	more := false
	for _, pg := range pages {
		items = append(items, pg.Items...)
		more = more || pg.Next != ""
	}
	slices.SortFunc(items, func(a, b evItem) int { return strings.Compare(a.Cursor, b.Cursor) })
	out := &evReply{Items: items}
	if len(items) > limit {
		out.Items, more = items[:limit], true
	}
	if more && len(out.Items) > 0 {
		out.Next = out.Items[len(out.Items)-1].Cursor
	}
	return out
}

// unreadCounts answers tally.unread: the unread family's counters of each uid, and from
// each uid's partition what the counters do not hold (see pulledOf), asked in parallel.
// Never partial numbers: when any uid's counters or partition cannot answer, neither
// does the request.
func (s *Server) unreadCounts(r *request) (any, error) {
	var req pipeline.UnreadRequest
	if err := r.decode(&req); err != nil {
		return nil, err
	}
	uids := req.UIDs
	single := req.UID != 0
	if single {
		if len(uids) > 0 {
			return nil, fmt.Errorf("%w: give uid or uids, not both", pipeline.ErrBadRequest)
		}
		uids = []pipeline.ID{req.UID}
	}
	// As counts says it, before any partition is asked.
	if len(uids) == 0 {
		return nil, fmt.Errorf("%w: ids is empty", pipeline.ErrBadRequest)
	}
	if len(uids) > pipeline.MaxQueryIDs {
		return nil, fmt.Errorf("%w: %d ids, at most %d per request", pipeline.ErrBadRequest, len(uids), pipeline.MaxQueryIDs)
	}
	at := map[int][]int{} // partition → indexes in uids
	for i, uid := range uids {
		p := s.partOf(uint64(uid))
		at[p] = append(at[p], i)
	}
	var (
		wg                   sync.WaitGroup
		counts               [][]uint64
		unavailable          []pipeline.ID
		countErr             error
		system, feed         = make([]uint64, len(uids)), make([]uint64, len(uids))
		mu                   sync.Mutex // guards partErr and missing
		partErr              error      // of a partition, other than unavailable
		missing              = map[int]bool{}
		partitions, partUIDs = slices.Sorted(maps.Keys(at)), map[int][]uint64{}
	)
	for p, idx := range at {
		for _, i := range idx {
			partUIDs[p] = append(partUIDs[p], uint64(uids[i]))
		}
	}
	wg.Go(func() { counts, unavailable, _, countErr = s.counts(r.ctx, s.unread, uids, true) }) // owner-only, as the rest of unread
	for _, p := range partitions {
		wg.Go(func() {
			reply, err := s.ev(r.ctx, p, evUnread, &evRequest{IDs: partUIDs[p]})
			if err == nil && (len(reply.System) != len(at[p]) || len(reply.Feed) != len(at[p])) {
				err = fmt.Errorf("event partition %d answered %d and %d uids of %d", p, len(reply.System), len(reply.Feed), len(at[p]))
			}
			if err != nil {
				mu.Lock()
				defer mu.Unlock()
				if pipeline.ErrorCode(err) == pipeline.CodeUnavailable {
					missing[p] = true
				} else if partErr == nil {
					partErr = err
				}
				return
			}
			for j, i := range at[p] {
				system[i], feed[i] = reply.System[j], reply.Feed[j]
			}
		})
	}
	wg.Wait()
	if countErr != nil {
		return nil, countErr
	}
	if partErr != nil {
		return nil, partErr
	}
	n := len(unavailable)
	for p := range missing {
		for _, i := range at[p] {
			if counts[i] != nil { // not counted among the unavailable already
				n++
			}
		}
	}
	if n > 0 { // never partial unread numbers
		return nil, fmt.Errorf("%w: %d of %d uids are unavailable: their partition is being handed over between processes (or its owner does not answer); retry shortly", errUnavailable, n, len(uids))
	}
	idx := func(name string) int { i, _ := s.unread.Field(name); return i }
	ic, im, il, id, ifeed := idx("comment"), idx("mention"), idx("like"), idx("dm"), idx("feed")
	users := make([]pipeline.Unread, len(counts))
	for i, c := range counts {
		users[i] = pipeline.Unread{Comment: c[ic], Mention: c[im], Like: c[il], DM: c[id], System: system[i], Feed: c[ifeed] + feed[i]}
	}
	if single {
		return pipeline.UnreadReply{Unread: users[0]}, nil
	}
	return pipeline.UnreadReply{Users: users}, nil
}

// maxPulled bounds the pulled posts counted per followee ("a lot" needs no exact figure).
const maxPulled = 10_000

// pulledOf computes, for readers uids of partition p, what their counters do not hold:
// system notices placed after their last read of system, and posts of followees with
// too many followers to push to (pulled, recorded in every partition), placed after
// both the last feed read and the follow (places in the events stream).
func (s *Server) pulledOf(p int, pulled *unread.Pulled, uids []uint64) (*evReply, error) {
	reply := &evReply{System: make([]uint64, len(uids)), Feed: make([]uint64, len(uids))}
	err := s.db.View(func(txn *cold.Txn) error {
		for i, uid := range uids {
			rs, err := unread.GetReader(txn, p, uid)
			if err != nil {
				return err
			}
			reply.System[i] = unread.CountNotices(txn, p, rs.System)
			if pulled == nil {
				continue
			}
			graph.Objects(txn, p, graph.Follow, uid, func(author uint64, _ int64) bool {
				if !pulled.Has(author) {
					return true
				}
				var followed uint64
				if followed, _, err = unread.GetFollowed(txn, p, author, uid); err != nil {
					return false
				}
				reply.Feed[i] += unread.CountPulled(txn, p, author, max(rs.Feed, followed), maxPulled)
				return true
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	return reply, err
}

// sample picks up to n ids of each kind among partition p's relations, for an audit:
// liked posts, followed users, users following (see graph.SampleRelated).
func (s *Server) sample(p, n int) (*evReply, error) {
	if n < 0 || n > pipeline.MaxAuditSample {
		return nil, fmt.Errorf("%w: sample %d out of range 0..%d", pipeline.ErrBadRequest, n, pipeline.MaxAuditSample)
	}
	liked, err := graph.SampleRelated(s.db, p, graph.Like, false, n, rand.Uint64)
	if err != nil {
		return nil, fmt.Errorf("cannot sample posts: %w", err)
	}
	followed, err := graph.SampleRelated(s.db, p, graph.Follow, false, n, rand.Uint64)
	if err != nil {
		return nil, fmt.Errorf("cannot sample users: %w", err)
	}
	following, err := graph.SampleRelated(s.db, p, graph.Follow, true, n, rand.Uint64)
	if err != nil {
		return nil, fmt.Errorf("cannot sample users: %w", err)
	}
	return &evReply{Posts: liked, Followed: followed, Following: following}, nil
}
