package natstest

import (
	"testing"
	"time"
)

// Eventually polls cond every 10ms until it holds, failing t with what cond last said
// once timeout has passed. Tests wait with it instead of sleeping.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		var ok bool
		if ok, last = cond(); ok {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s: still not true after %v: %s", what, timeout, last)
}
