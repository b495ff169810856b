package event

import (
	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/graph"
	"github.com/tally-dev/tally/store/unread"
)

// post indexes a post in its author's partition and announces it to every partition:
// pushed to the followers' feed counters, or pulled by them when its author has too many
// followers.
func (s *Stage) post(txn *cold.Txn, e *pipeline.Event, w *work) error {
	// The author's followers are listed in this partition (see follower), read up to one
	// past the limit (keys only). The decision is recorded with the post, so that pushed
	// and pulled posts are told apart for ever whatever the follows do later.
	p, limit := s.cfg.Partition, s.cfg.FanoutLimit
	n := 0
	graph.Subjects(txn, p, graph.Follow, uint64(e.UID), func(uint64, int64) bool {
		n++
		return n <= limit
	})
	pushed := n <= limit
	if err := unread.PutPost(txn, p, uint64(e.UID), e.Seq, uint64(e.Post), pushed); err != nil {
		return err
	}
	push := pipeline.Event{Type: pipeline.TypePush, UID: e.UID, Post: e.Post, Seq: e.Seq}
	if s.cfg.Windows { // the feed counters it adds to count at the post's minute
		push.TS = e.TS
	}
	if !pushed {
		push.Field = pipeline.PushPulled
		s.stats.Pulled.Add(1)
	}
	for q := range s.cfg.Partitions {
		if q != p {
			w.forward(q, &push)
		}
	}
	return s.arrive(txn, w, &push)
}

// arrive applies a pushed post in this partition: it is recorded, and each of the
// partition's readers following the author since before it, who has not read their
// feed after it, gets one more.
func (s *Stage) arrive(txn *cold.Txn, w *work, e *pipeline.Event) error {
	p, author := s.cfg.Partition, uint64(e.UID)
	if e.Field == pipeline.PushPulled {
		// Before the commit is harmless: a reader finding no pulled post counts zero.
		s.pulled.Add(author)
		return unread.PutPulled(txn, p, author, e.Seq)
	}
	if err := unread.PutArrived(txn, p, author, e.Seq); err != nil {
		return err
	}
	a, err := unread.GetAuthor(txn, p, author)
	if err != nil {
		return err
	}
	if e.Seq > a.Arrived {
		a.Arrived = e.Seq
		if err := unread.PutAuthor(txn, p, author, a); err != nil {
			return err
		}
	}
	if a.Followers == 0 {
		return nil
	}
	// The readers who read their feed after the post: an index by place, not a lookup
	// per follower.
	var read map[uint64]bool
	unread.FeedReadAfter(txn, p, e.Seq, func(uid uint64) {
		if read == nil {
			read = map[uint64]bool{}
		}
		read[uid] = true
	})
	var n int64
	err = unread.Followed(txn, p, author, func(uid, followed uint64) bool {
		if followed < e.Seq && !read[uid] {
			w.c.add(s.fields.unFeed, pipeline.ID(uid), pipeline.OpAdd, 1)
			n++
		}
		return true
	})
	s.stats.Pushed.Add(n)
	return err
}
