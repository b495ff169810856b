package pipeline_test

import (
	"slices"
	"testing"

	"github.com/tally-dev/tally/pipeline"
)

// TestWhereHeader: where partitions are served reads back as written, each process's
// partitions in one group, unknown ones left out; a header naming a partition twice or
// past the count, a bad count or a token that is not one subject token is refused.
func TestWhereHeader(t *testing.T) {
	w := pipeline.Where{At: []string{"a", "b", "", "a", "c", "b"}}
	if got, want := w.String(), "6;a=0,3;b=1,5;c=4"; got != want {
		t.Fatalf("written %q, want %q", got, want)
	}
	back, err := pipeline.ParseWhere(w.String())
	if err != nil || !slices.Equal(back.At, w.At) {
		t.Fatalf("read back %v, %v; want %v", back.At, err, w.At)
	}
	if none, err := pipeline.ParseWhere((pipeline.Where{At: make([]string, 3)}).String()); err != nil || !slices.Equal(none.At, []string{"", "", ""}) {
		t.Fatalf("nothing known: %v, %v", none.At, err)
	}
	for _, bad := range []string{"", "0", "-1", "x;a=0", "70000;a=0", "2;a=0;b=0", "2;a=2", "2;a=-1", "2;a=", "2;=0", "2;a.b=0", "2;a*=0", "2;a 0", "2;a=0,,1", "2;;a=0"} {
		if w, err := pipeline.ParseWhere(bad); err == nil {
			t.Errorf("%q read as %v, want an error", bad, w.At)
		}
	}
}
