package pipeline

import (
	"fmt"
	"time"
)

// WindowDay is the longest window, in minutes: a change whose minute is a day or more
// before the stream time of the transaction applying it counts in no window, and costs
// nothing.
const WindowDay = 24 * 60

// ParseWindow returns the minutes of a window named in a get request ("5m", "1h",
// "1d"); any other name is ErrBadRequest naming the allowed ones.
func ParseWindow(name string) (uint32, error) {
	switch name {
	case "5m":
		return 5, nil
	case "1h":
		return 60, nil
	case "1d":
		return WindowDay, nil
	}
	return 0, fmt.Errorf("%w: window %q, want one of 5m, 1h, 1d", ErrBadRequest, name)
}

// MinuteOf is the Unix minute of a time in milliseconds (0 before 1970).
func MinuteOf(ms int64) uint32 {
	if ms <= 0 {
		return 0
	}
	return uint32(min(ms/60_000, 1<<32-1))
}

// WindowSince is the first minute a window of the given minutes covers at time now: the
// minute now falls in and the minutes-1 before it. A change counts in the window when
// its minute is at or after it.
func WindowSince(now time.Time, minutes uint32) uint32 {
	m := MinuteOf(now.UnixMilli())
	if m < minutes {
		return 0
	}
	return m - minutes + 1
}
