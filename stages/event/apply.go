package event

import (
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

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

// applyMsgs applies msgs in txn and returns how many it applied (all, unless it fails
// or the transaction is full before the last: see work.full), the position of the last
// one, and collects in w what they cause.
func (s *Stage) applyMsgs(txn *cold.Txn, msgs []jetstream.Msg, w *work) (n int, pos uint64, err error) {
	for i, m := range msgs {
		if i > 0 && w.full(txn) {
			return i, pos, nil
		}
		seq, err := streamSeq(m)
		if err != nil {
			return i, pos, err
		}
		w.counted.messages++
		if err := s.applyMsg(txn, m, seq, w); err != nil {
			return i, pos, err
		}
		pos = seq
	}
	return len(msgs), pos, nil
}

// applyMsg applies one message: a producer's event or batch, or a hop batch of another
// partition. What cannot be applied because of its content is dead-lettered.
func (s *Stage) applyMsg(txn *cold.Txn, m jetstream.Msg, seq uint64, w *work) error {
	typ, err := s.cfg.Subjects.StoredType(m.Subject())
	if slices.Contains(w.deadSeqs, seq) {
		w.deadLetter(m, seq, -1, m.Data(), fmt.Errorf("%w: applying it would not fit in one transaction", pipeline.ErrBadEvent))
		w.dead = append(w.dead, seq)
		if err == nil && typ == pipeline.TypeHop {
			return s.fillHop(m, w)
		}
		return nil
	}
	if s.cfg.Windows {
		if md, err := m.Metadata(); err == nil {
			w.now = max(w.now, pipeline.MinuteOf(md.Timestamp.UnixMilli()))
		}
	}
	if err == nil && typ == pipeline.TypeHop {
		return s.applyHop(txn, m, seq, w)
	}
	var evs []pipeline.Event
	var bad []pipeline.BadEvent
	if err == nil {
		evs, bad, err = s.decode(typ, m)
	}
	if err != nil {
		w.deadLetter(m, seq, -1, m.Data(), err)
		return nil
	}
	for _, b := range bad {
		data, _ := pipeline.Marshal(&b.Event, true)
		w.deadLetter(m, seq, b.Index, data, b.Err)
	}
	ts := int64(0)
	for i := range evs {
		e := &evs[i]
		// Places are Tally's: what a producer sent is ignored.
		e.Seq, e.Local = pipeline.SeqOf(seq, i), false
		if e.TS == 0 {
			if ts == 0 {
				md, _ := m.Metadata()
				ts = md.Timestamp.UnixMilli()
			}
			e.TS = ts
		}
		if err := s.applyEvent(txn, e, false, w); err != nil {
			return fmt.Errorf("cannot apply %s event at %d: %w", e.Type, seq, err)
		}
	}
	return nil
}

// applyEvent applies one event here, or hands it to the partition that owns its
// relations; a system notice is also handed to every other partition. Events that came
// in a hop batch (local) are this partition's.
func (s *Stage) applyEvent(txn *cold.Txn, e *pipeline.Event, local bool, w *work) error {
	if !local && !e.Local {
		if e.Type == pipeline.TypeSystem {
			for q := range s.cfg.Partitions {
				if q != s.cfg.Partition {
					w.forward(q, e)
				}
			}
		}
		// A view with a uid counts a viewer in the post's sketch, kept in its partition.
		if owned := e.Relational() || (s.fields.counted && e.Type == pipeline.TypeView && e.UID != 0); owned {
			if q := w.c.partitionOf(e.Key()); q != s.cfg.Partition {
				w.forward(q, e)
				return nil
			}
		}
	}
	if s.cfg.Windows {
		w.c.minute, w.ts = windowMinute(e.TS, w.now), e.TS
	}
	if err := s.apply(txn, e, w); err != nil {
		return err
	}
	if i := pipeline.TypeIndex(e.Type); i >= 0 { // not the internal types
		w.counted.byType[i]++
	}
	return nil
}

// streamSeq is a message's sequence in the events stream.
func streamSeq(m jetstream.Msg) (uint64, error) {
	md, err := m.Metadata()
	if err != nil {
		return 0, fmt.Errorf("message without metadata: %w", err)
	}
	return md.Sequence.Stream, nil
}

// decode returns a message's events, or the reason it must be dead-lettered.
func (s *Stage) decode(typ string, m jetstream.Msg) ([]pipeline.Event, []pipeline.BadEvent, error) {
	batch := typ == pipeline.TypeBatch || typ == pipeline.TypeAdminBatch
	if m.Headers().Get(jetstream.MsgIDHeader) == "" && batch {
		return nil, nil, fmt.Errorf("%w: a batch needs a Nats-Msg-Id header", pipeline.ErrBadEvent)
	}
	evs, bad, err := s.dec.Decode(typ, m.Data(), m.Headers())
	if err != nil {
		return nil, nil, err
	}
	if m.Headers().Get(jetstream.MsgIDHeader) == "" && !batch && evs[0].Tx == "" {
		return nil, nil, fmt.Errorf("%w: no transaction id: set the Nats-Msg-Id header (or tx in the event)", pipeline.ErrBadEvent)
	}
	return evs, bad, nil
}
