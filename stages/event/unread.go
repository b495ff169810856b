package event

import (
	"math"

	"github.com/dgraph-io/badger/v4"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/store/cold"
)

// Feed unread. A reader's feed unread is the number of posts by the accounts they follow
// made after both their last feed read and the moment they followed the author. Posts
// of an author with at most FanoutLimit followers are pushed: each follower's feed
// counter grows by one. Posts of a bigger author are pulled: they cost one write, and a
// reader's query counts them. Either way every post is indexed by author and time,
// which is what makes the two agree and lets an unfollow take back exactly the pushed
// posts the reader had not read.

// post indexes a post and pushes it to the author's followers unless there are too many.
func (s *Stage) post(txn *badger.Txn, e *pipeline.Event, c *coalescer) error {
	pushed, err := s.fanout(txn, e, c)
	if err != nil {
		return err
	}
	if !pushed {
		// Before the commit is harmless: a reader finding no pulled post counts zero.
		s.cfg.Pulled.Add(uint64(e.UID))
	}
	return cold.PutPost(txn, uint64(e.UID), e.TS, uint64(e.Post), pushed)
}

func (s *Stage) fanout(txn *badger.Txn, e *pipeline.Event, c *coalescer) (bool, error) {
	// The follower list is read up to one past the limit (keys only). The counter of
	// followers is not asked: it lives in the user family's partition, which another
	// process may own.
	limit := s.cfg.FanoutLimit
	followers := make([]uint64, 0, 64)
	cold.Subjects(txn, cold.Follow, uint64(e.UID), func(a uint64, since int64) bool {
		if since < e.TS { // only who followed before the post sees it
			followers = append(followers, a)
		}
		return len(followers) <= limit
	})
	if len(followers) > limit {
		s.stats.Pulled.Add(1)
		return false, nil
	}
	for _, f := range followers {
		c.add(s.fields.unFeed, pipeline.ID(f), pipeline.OpAdd, 1)
	}
	s.stats.Pushed.Add(int64(len(followers)))
	return true, nil
}

// unfollowFeed takes back the pushed posts of the unfollowed author the reader got after
// their last feed read; pulled posts stop counting by themselves.
func (s *Stage) unfollowFeed(txn *badger.Txn, e *pipeline.Event, followed int64, c *coalescer) error {
	rs, err := cold.GetReader(txn, uint64(e.UID))
	if err != nil {
		return err
	}
	n, err := cold.CountPosts(txn, uint64(e.Target), max(rs.FeedRead, followed), true, math.MaxUint64)
	if err != nil {
		return err
	}
	if n > 0 {
		c.add(s.fields.unFeed, e.UID, pipeline.OpAdd, -int64(n))
	}
	return nil
}

// read resets the named kinds (all when none): notification and feed counters go to 0,
// the feed read time and the system notices seen are recorded.
func (s *Stage) read(txn *badger.Txn, e *pipeline.Event, c *coalescer) error {
	kinds := e.Kinds
	if len(kinds) == 0 {
		kinds = pipeline.UnreadKinds()
	}
	rs, err := cold.GetReader(txn, uint64(e.UID))
	if err != nil {
		return err
	}
	for _, k := range kinds {
		switch k {
		case "system":
			if rs.SysSeen, err = cold.SystemCount(txn, s.cfg.Partition); err != nil {
				return err
			}
		case "feed":
			rs.FeedRead = max(rs.FeedRead, e.TS)
			c.add(s.fields.unFeed, e.UID, pipeline.OpSet, 0)
		default:
			c.add(s.fields.unread[k], e.UID, pipeline.OpSet, 0)
		}
	}
	return cold.PutReader(txn, uint64(e.UID), rs)
}

// partitionKeys returns, for each partition, an id that routes to it.
func partitionKeys(n int) []pipeline.ID {
	keys := make([]pipeline.ID, n)
	found := 0
	for id := pipeline.ID(1); found < n; id++ {
		if p := pipeline.PartitionOf(id, n); keys[p] == 0 {
			keys[p] = id
			found++
		}
	}
	return keys
}
