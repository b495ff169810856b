package event

import (
	"strings"
	"testing"

	"github.com/tally-dev/tally/pipeline"
)

// TestParseSubject: the type token of <prefix>.ep.<p>.<type>.<key>, and a clear refusal
// of every other shape.
func TestParseSubject(t *testing.T) {
	s := &Stage{cfg: Config{Subjects: pipeline.NewSubjects("tally")}}
	for subj, want := range map[string]string{
		"tally.ep.3.like.42":    "like",
		"tally.ep.0.batch.7":    "batch",
		"tally.ep.15.hop.2":     "hop",
		"tally.ep.1..9":         "",
		"tally.ep.3.like.42.1":  "!",
		"tally.ep.3.like":       "!",
		"tally.ep.3":            "!",
		"tally.ev.like.42":      "!",
		"other.ep.3.like.42":    "!",
		"tallyx.ep.3.like.42":   "!",
		"tally.ep.3.like.42.":   "!",
		"tally.epx.3.like.42":   "!",
		"":                      "!",
		"tally.ep.3.view.18446": "view",
	} {
		typ, err := s.parseSubject(subj)
		switch {
		case want == "!" && (err == nil || !strings.Contains(err.Error(), "unexpected subject")):
			t.Errorf("%q: type %q, err %v; want it refused", subj, typ, err)
		case want != "!" && (err != nil || typ != want):
			t.Errorf("%q: type %q, err %v; want %q", subj, typ, err, want)
		}
	}
}
