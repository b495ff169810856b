package event

import (
	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/graph"
	"github.com/tally-dev/tally/store/unread"
)

// maxDrops is the most covered notification records one read deletes; the rest are
// never counted again (they are at or before the read) and go with later reads.
const maxDrops = 256

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
				n = w.readers.CountNotes(txn, uid, &rs, k, e.Seq)
			}
			if noted > prev {
				err = w.readers.DropNotes(txn, uid, &rs, k, prev, e.Seq, maxDrops)
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
	graph.Objects(txn, p, graph.Follow, uid, func(author uint64, _ int64) bool {
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
