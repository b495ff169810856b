package event

import (
	"github.com/dgraph-io/badger/v4"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/store/cold"
)

// apply makes the relation change of one event in txn and adds the deltas it causes.
// A relation that does not change (a second like, an unlike of nothing) adds nothing.
func (s *Stage) apply(txn *badger.Txn, e *pipeline.Event, c *coalescer) error {
	f := s.fields
	add := func(r fieldRef, id pipeline.ID, n int64) { c.add(r, id, pipeline.OpAdd, n) }
	notify := func(r fieldRef, owner, actor pipeline.ID) {
		if owner != 0 && owner != actor {
			add(r, owner, 1)
		}
	}
	var since int64 // when an undone relation was made
	relate := func(k cold.Kind, r cold.Rel, on bool) (bool, error) {
		var changed bool
		var err error
		if on {
			changed, err = cold.Relate(txn, k, r, e.TS)
		} else {
			changed, since, err = cold.Unrelate(txn, k, r)
		}
		if err == nil && !changed {
			s.stats.Unchanged.Add(1)
		}
		return changed, err
	}
	// toggle makes or undoes a user's relation to a post and counts it on the post; making
	// it notifies the post's owner.
	toggle := func(k cold.Kind, r cold.Rel, on bool, count, note fieldRef) error {
		changed, err := relate(k, r, on)
		if err != nil || !changed {
			return err
		}
		if !on {
			add(count, e.Post, -1)
			return nil
		}
		add(count, e.Post, 1)
		notify(note, e.Owner, e.UID)
		return nil
	}
	switch e.Type {
	case pipeline.TypeLike, pipeline.TypeUnlike:
		return toggle(cold.Like, cold.Rel{A: uint64(e.UID), B: uint64(e.Post)}, e.Type == pipeline.TypeLike, f.like, f.unLike)
	case pipeline.TypeComment, pipeline.TypeUncomment:
		return toggle(cold.Comment, cold.Rel{A: uint64(e.UID), B: uint64(e.Post), C: uint64(e.Comment)},
			e.Type == pipeline.TypeComment, f.comment, f.unComment)
	case pipeline.TypeFollow, pipeline.TypeUnfollow:
		on := e.Type == pipeline.TypeFollow
		changed, err := relate(cold.Follow, cold.Rel{A: uint64(e.UID), B: uint64(e.Target)}, on)
		if err != nil || !changed {
			return err
		}
		n := int64(1)
		if !on {
			n = -1
		}
		add(f.following, e.UID, n)
		add(f.follower, e.Target, n)
		if !on {
			return s.unfollowFeed(txn, e, since, c)
		}
	case pipeline.TypeRepost:
		add(f.repost, e.Post, 1)
		add(f.posts, e.UID, 1)
	case pipeline.TypePost:
		add(f.posts, e.UID, 1)
		return s.post(txn, e, c)
	case pipeline.TypeView:
		add(f.view, e.Post, max(e.N, 1))
	case pipeline.TypeMention:
		notify(f.unMention, e.Target, e.UID)
	case pipeline.TypeDM:
		notify(f.unDM, e.Target, e.UID)
	case pipeline.TypeRead:
		return s.read(txn, e, c)
	case pipeline.TypeSystem:
		n, err := cold.SystemCount(txn, s.cfg.Partition)
		if err != nil {
			return err
		}
		return cold.PutSystemCount(txn, s.cfg.Partition, n+1)
	case pipeline.TypeIncr:
		fam, _ := s.cfg.Families.Lookup(e.Family) // validated at decode
		i, _ := fam.Field(e.Field)
		add(fieldRef{family: e.Family, field: uint8(i)}, e.ID, e.N)
	}
	return nil
}
