package event

import (
	"github.com/dgraph-io/badger/v4"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/store/cold"
)

// apply makes the relation change of one event in txn and adds the deltas it causes.
// A relation that does not change (a second like, an unlike of nothing) adds nothing.
func (s *Stage) apply(txn *badger.Txn, e *pipeline.Event, w *work) error {
	f, c, p := s.fields, w.c, s.cfg.Partition
	add := func(r fieldRef, id pipeline.ID, n int64) { c.add(r, id, pipeline.OpAdd, n) }
	// notify notifies the owner of a post of the relation this event made, placed at
	// e.Seq; when moved is not 0 the relation was made already by a copy placed later
	// (at moved), applied first, and its notification moves to this place.
	notify := func(kind string, owner, actor pipeline.ID, moved uint64) error {
		if owner != 0 && owner != actor {
			return s.notify(txn, w, kind, owner, e.Seq, moved)
		}
		return nil
	}
	var at uint64   // the place an existing relation keeps
	var since int64 // the time a removed relation was made
	relate := func(k cold.Kind, r cold.Rel, on bool) (bool, error) {
		var changed bool
		var err error
		switch {
		case k == cold.Like && on:
			changed, at, err = w.likes.Like(txn, r.A, r.B, e.TS, e.Seq)
		case k == cold.Like:
			changed, since, err = w.likes.Unlike(txn, r.A, r.B)
		case on:
			changed, at, err = cold.RelateAt(txn, p, k, r, e.TS, e.Seq)
		default:
			changed, since, err = cold.Unrelate(txn, p, k, r)
		}
		if err == nil && !changed {
			s.stats.Unchanged.Add(1)
		}
		return changed, err
	}
	// toggle makes or undoes a user's relation to a post and counts it on the post; making
	// it notifies the post's owner.
	toggle := func(k cold.Kind, r cold.Rel, on bool, count fieldRef, note string) error {
		changed, err := relate(k, r, on)
		if err == nil && on && !changed && at > e.Seq {
			return notify(note, e.Owner, e.UID, at)
		}
		if err != nil || !changed {
			return err
		}
		if !on {
			add(count, e.Post, -1)
			return nil
		}
		add(count, e.Post, 1)
		return notify(note, e.Owner, e.UID, 0)
	}
	switch e.Type {
	case pipeline.TypeLike, pipeline.TypeUnlike:
		return toggle(cold.Like, cold.Rel{A: uint64(e.UID), B: uint64(e.Post)}, e.Type == pipeline.TypeLike, f.like, "like")
	case pipeline.TypeComment, pipeline.TypeUncomment:
		return toggle(cold.Comment, cold.Rel{A: uint64(e.UID), B: uint64(e.Post), C: uint64(e.Comment)},
			e.Type == pipeline.TypeComment, f.comment, "comment")
	case pipeline.TypeFollow, pipeline.TypeUnfollow:
		on := e.Type == pipeline.TypeFollow
		changed, err := relate(cold.Follow, cold.Rel{A: uint64(e.UID), B: uint64(e.Target)}, on)
		if err == nil && on && !changed && at > e.Seq {
			return s.refollow(txn, e, w)
		}
		if err != nil || !changed {
			return err
		}
		n, ts := int64(1), e.TS
		if !on {
			n, ts = -1, since
		}
		add(f.following, e.UID, n)
		add(f.follower, e.Target, n)
		if err := s.follower(txn, w, &pipeline.Event{Type: pipeline.TypeFollower, UID: e.UID, Target: e.Target, TS: ts, N: n, Seq: e.Seq}); err != nil {
			return err
		}
		if !on {
			return s.unfollow(txn, e, w)
		}
		return s.follow(txn, e, w)
	case pipeline.TypeRepost:
		add(f.repost, e.Post, 1)
		add(f.posts, e.UID, 1)
	case pipeline.TypePost:
		add(f.posts, e.UID, 1)
		return s.post(txn, e, w)
	case pipeline.TypeView:
		add(f.view, e.Post, max(e.N, 1))
	case pipeline.TypeMention:
		return notify("mention", e.Target, e.UID, 0)
	case pipeline.TypeDM:
		return notify("dm", e.Target, e.UID, 0)
	case pipeline.TypeRead:
		return s.read(txn, e, w)
	case pipeline.TypeSystem:
		return cold.PutNotice(txn, p, e.Seq)
	case pipeline.TypeNotify: // from another partition, for one of this one's users
		return s.notify(txn, w, e.Field, e.Target, e.Seq, uint64(e.ID))
	case pipeline.TypePush:
		return s.arrive(txn, w, e)
	case pipeline.TypeFollower:
		return s.follower(txn, w, e)
	case pipeline.TypeIncr:
		fam, _ := s.cfg.Families.Lookup(e.Family) // validated at decode
		i, _ := fam.Field(e.Field)
		add(fieldRef{family: e.Family, field: uint8(i)}, e.ID, e.N)
	}
	return nil
}
