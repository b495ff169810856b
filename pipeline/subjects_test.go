package pipeline

import "testing"

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
	if err := (Families{{Name: "ev", Fields: []string{"n"}}}).Validate(); err == nil {
		t.Error("a family named ev is valid, but its part subjects would be the event partitions'")
	}
}
