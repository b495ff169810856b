package event

import (
	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/graph"
	"github.com/tally-dev/tally/store/rel"
	"github.com/tally-dev/tally/store/unread"
)

// apply makes the relation change of one event in txn and adds the deltas it causes.
// A relation's events are applied by their place in the events stream, whatever the
// order they arrive in (see store/rel): what changes is derived from the relation's
// state before and after the event, so an event that changes nothing adds nothing.
func (s *Stage) apply(txn *cold.Txn, e *pipeline.Event, w *work) error {
	f, c, p := s.fields, w.c, s.cfg.Partition
	add := func(r fieldRef, id pipeline.ID, n int64) { c.add(r, id, pipeline.OpAdd, n) }
	ev := rel.Event{Place: e.Seq, TS: e.TS, Owner: uint64(e.Owner)}
	switch e.Type {
	case pipeline.TypeLike, pipeline.TypeUnlike:
		before, after, forgot, err := w.likes.Toggle(txn, uint64(e.UID), uint64(e.Post), e.Type == pipeline.TypeLike, ev)
		if err != nil {
			return err
		}
		return s.related(txn, w, e, "like", f.like, before, after, forgot)
	case pipeline.TypeComment, pipeline.TypeUncomment:
		r := graph.Rel{A: uint64(e.UID), B: uint64(e.Post), C: uint64(e.Comment)}
		before, after, forgot, err := graph.Toggle(txn, p, graph.Comment, r, e.Type == pipeline.TypeComment, ev)
		if err != nil {
			return err
		}
		return s.related(txn, w, e, "comment", f.comment, before, after, forgot)
	case pipeline.TypeFollow, pipeline.TypeUnfollow:
		ev.Owner = 0 // a follow notifies nobody
		r := graph.Rel{A: uint64(e.UID), B: uint64(e.Target)}
		before, after, forgot, err := graph.Toggle(txn, p, graph.Follow, r, e.Type == pipeline.TypeFollow, ev)
		if err != nil {
			return err
		}
		return s.followed(txn, w, e.UID, e.Target, before, after, forgot)
	case pipeline.TypeRepost:
		add(f.repost, e.Post, 1)
		add(f.posts, e.UID, 1)
	case pipeline.TypePost:
		add(f.posts, e.UID, 1)
		return s.post(txn, e, w)
	case pipeline.TypeView:
		add(f.view, e.Post, max(e.N, 1))
		if f.counted && e.UID != 0 {
			return w.viewers.Add(txn, uint64(e.Post), uint64(e.UID))
		}
	case pipeline.TypeMention, pipeline.TypeDM:
		if e.Target != e.UID {
			return s.notify(txn, w, e.Type, e.Target, e.Seq, 0)
		}
	case pipeline.TypeRead:
		return s.read(txn, e, w)
	case pipeline.TypeSystem:
		return unread.PutNotice(txn, p, e.Seq)
	case pipeline.TypeNotify: // from another partition, for one of this one's users
		if e.N < 0 { // taken back: its relation was undone or moved
			return s.notify(txn, w, e.Field, e.Target, 0, e.Seq)
		}
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

// related derives what a like or a comment changed, from its relation's state before
// and after the event: the post's count, and the owner's notification, which is placed
// where the relation was made and taken back when it is undone (moved when the place
// moves).
func (s *Stage) related(txn *cold.Txn, w *work, e *pipeline.Event, kind string, count fieldRef, before, after rel.State, forgot bool) error {
	if unchanged(w, before, after, forgot) {
		return nil
	}
	switch {
	case after.On && !before.On:
		w.c.add(count, e.Post, pipeline.OpAdd, 1)
	case before.On && !after.On:
		w.c.add(count, e.Post, pipeline.OpAdd, -1)
	}
	var was, now rel.Event // the notifications before and after (Place 0: none)
	if before.On && notifies(before.Made.Owner, e.UID) {
		was = before.Made
	}
	if after.On && notifies(after.Made.Owner, e.UID) {
		now = after.Made
	}
	switch {
	case was.Place == now.Place && was.Owner == now.Owner:
		return nil
	case was.Place != 0 && now.Place != 0 && was.Owner == now.Owner:
		return s.notify(txn, w, kind, pipeline.ID(now.Owner), now.Place, was.Place)
	}
	if was.Place != 0 {
		if err := s.notify(txn, w, kind, pipeline.ID(was.Owner), 0, was.Place); err != nil {
			return err
		}
	}
	if now.Place != 0 {
		return s.notify(txn, w, kind, pipeline.ID(now.Owner), now.Place, 0)
	}
	return nil
}

// unchanged reports whether a relation event changed nothing anyone asks about, and
// counts it in w; and counts a relation that forgot an older "on" (rel.MaxLater).
func unchanged(w *work, before, after rel.State, forgot bool) bool {
	if forgot {
		w.counted.forgotten++
	}
	if before.SameView(after) {
		w.counted.unchanged++
		return true
	}
	return false
}

// notifies reports whether a relation of actor's with a post of owner notifies them.
func notifies(owner uint64, actor pipeline.ID) bool { return owner != 0 && owner != uint64(actor) }

// followed derives what a follow or an unfollow changed, from its relation's state
// before and after the event: both users' counts, the followed user's list of
// followers (kept in their partition), and the follower's feed, each undone where the
// relation was made before and done where it is made now.
func (s *Stage) followed(txn *cold.Txn, w *work, uid, target pipeline.ID, before, after rel.State, forgot bool) error {
	if unchanged(w, before, after, forgot) {
		return nil
	}
	if n := boolInt(after.On) - boolInt(before.On); n != 0 {
		w.c.add(s.fields.following, uid, pipeline.OpAdd, n)
		w.c.add(s.fields.follower, target, pipeline.OpAdd, n)
	}
	if before.On {
		e := pipeline.Event{Type: pipeline.TypeFollower, UID: uid, Target: target, TS: before.Made.TS, N: -1, Seq: before.Made.Place}
		if err := s.follower(txn, w, &e); err != nil {
			return err
		}
		if err := s.unfollow(txn, uint64(uid), uint64(target), w); err != nil {
			return err
		}
	}
	if !after.On {
		return nil
	}
	e := pipeline.Event{Type: pipeline.TypeFollower, UID: uid, Target: target, TS: after.Made.TS, N: 1, Seq: after.Made.Place}
	if err := s.follower(txn, w, &e); err != nil {
		return err
	}
	return s.follow(txn, uint64(uid), uint64(target), after.Made.Place, w)
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
