package pipeline

import (
	"errors"
	"testing"
)

// TestPartSubjects: the subjects between processes, which the other processes of a prefix
// must build alike; a family cannot take the event partitions' name.
func TestPartSubjects(t *testing.T) {
	s := NewSubjects("")
	f := func(t *testing.T, got, want string) {
		t.Helper()
		if got != want {
			t.Errorf("subject %q, want %q", got, want)
		}
	}
	f(t, s.Part("post", 3), "tally.part.post.3")
	f(t, s.PartEvents(3), "tally.part.ev.3")
	f(t, NewSubjects("t2").PartEvents(0), "t2.part.ev.0")
	f(t, s.Peer("post", "abc"), "tally.part.post.peer.abc")
	f(t, s.Peers("abc"), "tally.part.*.peer.abc")
	if err := (Families{{Name: "ev", Fields: []string{"n"}}}).Validate(); err == nil {
		t.Error("a family named ev is valid, but its part subjects would be the event partitions'")
	}
}

// TestStoredType: the type token of a stored event's subject in both forms,
// <prefix>.ep.<p>.<type> and <prefix>.ep.<p>.<type>.<key> (KeyedEvents, and before 1.8),
// and a clear refusal of every other shape.
func TestStoredType(t *testing.T) {
	s := NewSubjects("tally")
	for subj, want := range map[string]string{
		"tally.ep.3.like":       "like",
		"tally.ep.0.batch":      "batch",
		"tally.ep.15.hop":       "hop",
		"tally.ep.3.like.42":    "like",
		"tally.ep.0.batch.7":    "batch",
		"tally.ep.15.hop.2":     "hop",
		"tally.ep.3.view.18446": "view",
		"tally.ep.1..9":         "",
		"tally.ep.1.":           "",
		"tally.ep.3.like.42.1":  "!",
		"tally.ep.3.like.":      "!",
		"tally.ep.3":            "!",
		"tally.ev.like.42":      "!",
		"other.ep.3.like.42":    "!",
		"tallyx.ep.3.like.42":   "!",
		"tally.ep.3.like.42.":   "!",
		"tally.epx.3.like.42":   "!",
		"":                      "!",
	} {
		typ, err := s.StoredType(subj)
		switch {
		case want == "!" && !errors.Is(err, ErrBadEvent):
			t.Errorf("%q: type %q, err %v; want it refused", subj, typ, err)
		case want != "!" && (err != nil || typ != want):
			t.Errorf("%q: type %q, err %v; want %q", subj, typ, err, want)
		}
	}
}
