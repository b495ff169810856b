package event

import (
	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/unread"
)

// Unread by the events stream's order. Every rule compares places in the stream
// (pipeline.Event.Seq), never times, and every unread counter of a user changes only in
// the user's own partition, which applies its own stream in order: a hop batch from
// another partition is published after that partition committed the events it carries,
// so its own place in the stream is after each of them, and the receiving partition has
// applied every event of its own stream placed before it. What it has not seen yet is a
// read (or follow, unfollow) forwarded from another partition's batch, which may come
// after events placed later than itself; the rules below make those exact too.
//
//   - A notification of kind k for user O, placed at P, is applied in O's partition
//     (handed there as a notify event when it happens elsewhere). It counts if P is
//     after O's last read of k, and is recorded (n|O|k|P) until a read covers it.
//   - A read of k placed at R, later than O's last read of k, becomes the last read. A
//     read from the partition's own stream covers everything the partition applied
//     before it (all placed before R): the counter is set to 0. A read handed over from
//     another partition sets it to the recorded notifications placed after R.
//   - Feed: a post by an author with at most FanoutLimit followers is pushed: announced
//     (a push event) to every partition, which records it (h|q|author|P) and adds one to
//     each of its own users following the author since before P who have not read
//     their feed after P. A follow placed at F adds the recorded posts after both F and
//     the last feed read (they reached the partition before the follow did); an
//     unfollow takes back the same set, which is exactly what was counted for the
//     reader; a feed read handed over recounts them per followee. Pulled posts (above
//     the limit) are counted when a reader asks, from the post index (author, place).
//   - A system notice placed at S is recorded by every partition (z|q|S); a read of
//     system records its place, and unread system is the notices recorded after it.

// maxDrops is the most covered notification records one read deletes; the rest are
// never counted again (they are at or before the read) and go with later reads.
const maxDrops = 256

// notify counts a notification of kind for owner caused by an event at place seq (0:
// none), and takes back the one placed at moved (0: none) — the same relation's, made
// elsewhere or undone: here when owner is this partition's, else handed to owner's
// partition, through the same channel after the notification it takes back.
func (s *Stage) notify(txn *cold.Txn, w *work, kind string, owner pipeline.ID, seq, moved uint64) error {
	if q := pipeline.PartitionOf(owner, s.cfg.Partitions); q != s.cfg.Partition {
		n := pipeline.Event{Type: pipeline.TypeNotify, Target: owner, Field: kind, Seq: seq, ID: pipeline.ID(moved)}
		if seq == 0 { // only taken back
			n.Seq, n.ID, n.N = moved, 0, -1
		}
		w.forward(q, &n)
		return nil
	}
	p := s.cfg.Partition
	rs, err := w.readers.Get(txn, uint64(owner))
	if err != nil {
		return err
	}
	read, changed := *rs.Read(kind), false
	if moved > read { // counted and recorded, not covered by a read yet
		w.c.add(s.fields.unread[kind], owner, pipeline.OpAdd, -1)
		if err := unread.TakeNote(txn, p, uint64(owner), &rs, kind, moved); err != nil {
			return err
		}
		changed = true
	}
	if seq > read { // else none, or a read placed after it came first
		w.c.add(s.fields.unread[kind], owner, pipeline.OpAdd, 1)
		if err := unread.AddNote(txn, p, uint64(owner), &rs, kind, seq); err != nil {
			return err
		}
		changed = true
	}
	if changed {
		w.readers.Put(uint64(owner), rs)
	}
	return nil
}

// post indexes a post in its author's partition and announces it to every partition:
// pushed to the followers' feed counters, or pulled by them when its author has too many
// followers.
func (s *Stage) post(txn *cold.Txn, e *pipeline.Event, w *work) error {
	// The author's followers are listed in this partition (see follower), read up to one
	// past the limit (keys only). The decision is recorded with the post, so that pushed
	// and pulled posts are told apart for ever whatever the follows do later.
	p, limit := s.cfg.Partition, s.cfg.FanoutLimit
	n := 0
	cold.Subjects(txn, p, cold.Follow, uint64(e.UID), func(uint64, int64) bool {
		n++
		return n <= limit
	})
	pushed := n <= limit
	if err := unread.PutPost(txn, p, uint64(e.UID), e.Seq, uint64(e.Post), pushed); err != nil {
		return err
	}
	push := pipeline.Event{Type: pipeline.TypePush, UID: e.UID, Post: e.Post, Seq: e.Seq}
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

// follower keeps the list of an author's followers in the author's partition: applied
// here when the author is this partition's, else handed there.
func (s *Stage) follower(txn *cold.Txn, w *work, e *pipeline.Event) error {
	p := s.cfg.Partition
	if q := pipeline.PartitionOf(e.Target, s.cfg.Partitions); q != p {
		w.forward(q, e)
		return nil
	}
	r := cold.Rel{A: uint64(e.UID), B: uint64(e.Target)}
	if e.N < 0 {
		return cold.DeleteFollower(txn, p, r, e.TS)
	}
	return cold.AddFollower(txn, p, r, e.TS)
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

// read records the place of a read of the named kinds (all when none) and sets their
// counters to what is unread after it; a read placed before the last one of a kind
// changes nothing of that kind.
func (s *Stage) read(txn *cold.Txn, e *pipeline.Event, w *work) error {
	kinds := e.Kinds
	if len(kinds) == 0 {
		kinds = pipeline.UnreadKinds()
	}
	uid := uint64(e.UID)
	rs, err := w.readers.Get(txn, uid)
	if err != nil {
		return err
	}
	changed := false
	for _, k := range kinds {
		last := rs.Read(k)
		if last == nil || e.Seq <= *last {
			continue
		}
		prev := *last
		*last, changed = e.Seq, true
		var n uint64 // unread after the read: none of what came before it here
		switch k {
		case "system":
			continue // counted when asked
		case "feed":
			if w.hop {
				n, err = s.feedAfter(txn, uid, e.Seq)
			}
			if err == nil {
				err = unread.PutFeedRead(txn, s.cfg.Partition, uid, prev, e.Seq)
			}
		default:
			// Records exist only up to the last one noted.
			noted := *rs.Note(k)
			if w.hop && noted > e.Seq {
				n = unread.CountNotes(txn, s.cfg.Partition, uid, &rs, k, e.Seq)
			}
			if noted > prev {
				err = unread.DropNotes(txn, s.cfg.Partition, uid, &rs, k, prev, e.Seq, maxDrops)
			}
		}
		if err != nil {
			return err
		}
		w.c.add(s.fields.unread[k], e.UID, pipeline.OpSet, int64(n))
	}
	if !changed {
		return nil
	}
	w.readers.Put(uid, rs)
	return nil
}

// feedAfter counts, over the reader's followees, the pushed posts that reached the
// partition placed after both the follow and seq.
func (s *Stage) feedAfter(txn *cold.Txn, uid, seq uint64) (uint64, error) {
	p := s.cfg.Partition
	var n uint64
	var err error
	cold.Objects(txn, p, cold.Follow, uid, func(author uint64, _ int64) bool {
		var followed uint64
		var a unread.AuthorState
		if followed, _, err = unread.GetFollowed(txn, p, author, uid); err != nil {
			return false
		}
		if a, err = unread.GetAuthor(txn, p, author); err != nil {
			return false
		}
		if a.Arrived > max(followed, seq) {
			n += unread.CountArrived(txn, p, author, max(followed, seq))
		}
		return true
	})
	return n, err
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
