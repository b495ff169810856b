package pipeline_test

import (
	"errors"
	"testing"
	"time"

	"github.com/tally-dev/tally/pipeline"
)

func TestWindowSince(t *testing.T) {
	base := time.Date(2026, 11, 25, 10, 30, 0, 0, time.UTC)
	minute := pipeline.MinuteOf(base.UnixMilli())
	f := func(now time.Time, window string, want uint32) {
		t.Helper()
		m, err := pipeline.ParseWindow(window)
		if err != nil {
			t.Fatal(err)
		}
		if got := pipeline.WindowSince(now, m); got != want {
			t.Fatalf("%s at %v: since minute %d, want %d", window, now, got, want)
		}
	}
	f(base, "5m", minute-4)                                          // 10:26 to 10:30
	f(base.Add(59*time.Second+999*time.Millisecond), "5m", minute-4) // the same minute
	f(base.Add(time.Minute), "5m", minute-3)                         // the next: 10:26 leaves
	f(base.Add(-time.Millisecond), "5m", minute-5)                   // the minute before
	f(base, "1h", minute-59)
	f(base, "1d", minute-pipeline.WindowDay+1)
	for _, bad := range []string{"", "2h", "1H", "60m"} {
		if _, err := pipeline.ParseWindow(bad); !errors.Is(err, pipeline.ErrBadRequest) {
			t.Fatalf("window %q: %v, want a bad request", bad, err)
		}
	}
	if pipeline.MinuteOf(-5) != 0 || pipeline.MinuteOf(59_999) != 0 || pipeline.MinuteOf(60_000) != 1 {
		t.Fatal("MinuteOf at its edges")
	}
}
