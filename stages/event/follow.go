package event

import (
	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/graph"
	"github.com/tally-dev/tally/store/unread"
)

// follower keeps the list of an author's followers in the author's partition: applied
// here when the author is this partition's, else handed there.
func (s *Stage) follower(txn *cold.Txn, w *work, e *pipeline.Event) error {
	p := s.cfg.Partition
	if q := w.c.partitionOf(e.Target); q != p {
		w.forward(q, e)
		return nil
	}
	r := graph.Rel{A: uint64(e.UID), B: uint64(e.Target)}
	if e.N < 0 {
		return graph.DeleteFollower(txn, p, r, e.TS)
	}
	return graph.AddFollower(txn, p, r, e.TS)
}

// follow indexes a follow by the partition's reader uid of author, made at place, and
// adds the pushed posts of the author that reached the partition before it but are
// placed after it and after the reader's last feed read: they were not pushed to the
// reader on arrival.
func (s *Stage) follow(txn *cold.Txn, uid, author, place uint64, w *work) error {
	p := s.cfg.Partition
	if err := unread.PutFollowed(txn, p, author, uid, place); err != nil {
		return err
	}
	a, err := unread.GetAuthor(txn, p, author)
	if err != nil {
		return err
	}
	a.Followers++
	if err := unread.PutAuthor(txn, p, author, a); err != nil {
		return err
	}
	if a.Arrived <= place {
		return nil // nothing after the follow reached the partition yet
	}
	rs, err := w.readers.Get(txn, uid)
	if err != nil {
		return err
	}
	if n := unread.CountArrived(txn, p, author, max(place, rs.Feed)); n > 0 {
		w.c.add(s.fields.unFeed, pipeline.ID(uid), pipeline.OpAdd, int64(n))
	}
	return nil
}

// unfollow takes back what the reader's feed counter holds of the author: the pushed
// posts that reached the partition, placed after both the follow and the last feed read.
// Posts still on their way are not pushed to the reader any more; pulled posts stop
// counting by themselves. A follow whose place moves is unfollowed at the old place and
// followed at the new.
func (s *Stage) unfollow(txn *cold.Txn, uid, author uint64, w *work) error {
	p := s.cfg.Partition
	followed, ok, err := unread.GetFollowed(txn, p, author, uid)
	if err != nil {
		return err
	}
	if err := unread.DeleteFollowed(txn, p, author, uid); err != nil {
		return err
	}
	a, err := unread.GetAuthor(txn, p, author)
	if err != nil {
		return err
	}
	if ok && a.Followers > 0 {
		a.Followers--
		if err := unread.PutAuthor(txn, p, author, a); err != nil {
			return err
		}
	}
	if a.Arrived <= followed {
		return nil // nothing after the follow reached the partition
	}
	rs, err := w.readers.Get(txn, uid)
	if err != nil {
		return err
	}
	if n := unread.CountArrived(txn, p, author, max(followed, rs.Feed)); n > 0 {
		w.c.add(s.fields.unFeed, pipeline.ID(uid), pipeline.OpAdd, -int64(n))
	}
	return nil
}
