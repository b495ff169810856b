package rel

import "slices"

// Event is an "on" event of a relation (a like, a comment, a follow): its place in the
// events stream (pipeline.Event.Seq), its time in milliseconds, and whom it notifies (0:
// nobody). An "off" event needs its place only.
type Event struct {
	Place uint64
	TS    int64
	Owner uint64
}

// MaxLater is the most "on" events a state keeps after the one that made the relation.
// They matter only when an "off" placed among them arrives after them; a relation liked
// again and again (more than MaxLater times between an unlike's place and its arrival)
// forgets the oldest, and such an unlike then moves the relation's place to a later like
// than the stream's order would (Apply says when it forgot one). On or off, the state
// itself is always exact.
const MaxLater = 16

// State is one relation. The zero State is a relation never made.
//
// While On, Made is the first "on" after the last "off" (by place), Later the other "on"
// events after it, ascending, and Off the place of the last "off" before Made (0: none).
// While off, Off is the place of the last event, an "off" (0: no event at all): it is the
// relation's tombstone, which an "on" placed before it cannot pass.
type State struct {
	On    bool
	Made  Event
	Later []Event
	Off   uint64
}

// Apply takes an event placed at e.Place: on makes the relation, !on undoes it (only
// e.Place counts then). It may change s.Later in place: apply to a Clone of a state
// another holds. It returns whether the relation's view — On and Made — changed,
// and whether an older "on" had to be forgotten (see MaxLater). An event at a place
// already taken is the same event: it changes nothing.
func (s *State) Apply(on bool, e Event) (changed, forgot bool) {
	switch {
	case on && !s.On:
		if e.Place <= s.Off && s.Off != 0 {
			return false, false // an "off" placed after it came first
		}
		*s = State{On: true, Made: e, Off: s.Off}
		return true, false
	case on:
		switch {
		case s.Off != 0 && e.Place <= s.Off, e.Place == s.Made.Place:
			return false, false
		case e.Place < s.Made.Place: // made earlier than known: the old place joins Later
			forgot = s.later(s.Made)
			s.Made = e
			return true, forgot
		}
		return false, s.later(e)
	case !s.On:
		s.Off = max(s.Off, e.Place)
		return false, false
	case e.Place <= s.Made.Place:
		// Before the relation was made: only a later tombstone than the one known.
		if e.Place != s.Made.Place {
			s.Off = max(s.Off, e.Place)
		}
		return false, false
	}
	// An "off" after Made: the relation is made again by the first "on" after it, if any.
	i, _ := slices.BinarySearchFunc(s.Later, e.Place, func(l Event, p uint64) int { return cmpPlace(l.Place, p) })
	if i < len(s.Later) && s.Later[i].Place == e.Place {
		return false, false
	}
	if i == len(s.Later) {
		*s = State{Off: e.Place}
		return true, false
	}
	s.Made, s.Later, s.Off = s.Later[i], slices.Clone(s.Later[i+1:]), e.Place
	if len(s.Later) == 0 {
		s.Later = nil
	}
	return true, false
}

// later adds e to Later in place order, forgetting the oldest past MaxLater.
func (s *State) later(e Event) (forgot bool) {
	i, found := slices.BinarySearchFunc(s.Later, e.Place, func(l Event, p uint64) int { return cmpPlace(l.Place, p) })
	switch {
	case found:
		return false
	case len(s.Later) < MaxLater:
		s.Later = slices.Insert(s.Later, i, e)
		return false
	case i > 0: // full: the oldest goes, the ones before e move down, in place
		copy(s.Later, s.Later[1:i])
		s.Later[i-1] = e
	}
	return true // full, and e the oldest: forgotten at once
}

func cmpPlace(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Tombstone reports whether the state is an undone relation that must be kept: an "on"
// placed before Off must find it.
func (s *State) Tombstone() bool { return !s.On && s.Off != 0 }

// Clone copies s, so that applying an event to the copy leaves s as it was.
func (s State) Clone() State {
	s.Later = slices.Clone(s.Later)
	return s
}

// Equal reports whether s and o are the same state, down to the events they keep.
func (s State) Equal(o State) bool {
	return s.On == o.On && s.Made == o.Made && s.Off == o.Off && slices.Equal(s.Later, o.Later)
}

// SameView reports whether s and o answer alike: both undone, or both made by the same
// event. What they keep to order late events by may differ.
func (s State) SameView(o State) bool { return s.On == o.On && s.Made == o.Made }
