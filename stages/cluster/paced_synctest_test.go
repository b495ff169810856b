package cluster

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// TestPaced: calls quicker than the period come once a period; a slow call is followed by
// a rest of rest× its length, so the calls never take more than their share of the
// time (Every would run them back to back).
func TestPaced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lengths := []time.Duration{10 * time.Millisecond, 2 * time.Second, 10 * time.Millisecond, 5 * time.Second, 10 * time.Millisecond}
		var starts []time.Time
		begin := time.Now()
		stop := errors.New("done")
		err := Paced(context.Background(), 300*time.Millisecond, 3, func() error {
			starts = append(starts, time.Now())
			if len(starts) > len(lengths) {
				return stop
			}
			time.Sleep(lengths[len(starts)-1])
			return nil
		})
		if !errors.Is(err, stop) {
			t.Fatalf("Paced returned %v, want fn's error", err)
		}
		// 300 ms; the next 300 ms later; a 2 s call, then 6 s of rest; 10 ms, then the rest
		// of the 300 ms period; a 5 s call and 15 s of rest.
		want := []time.Duration{300 * time.Millisecond, 600 * time.Millisecond, 8600 * time.Millisecond, 8900 * time.Millisecond, 28900 * time.Millisecond, 29200 * time.Millisecond}
		if len(starts) != len(want) {
			t.Fatalf("%d calls, want %d", len(starts), len(want))
		}
		for i, s := range starts {
			if got := s.Sub(begin); got != want[i] {
				t.Errorf("call %d at %v, want %v", i, got, want[i])
			}
		}
	})
}

// TestPacedEndsWithCtx: Paced returns nil once ctx ends, also while it rests.
func TestPacedEndsWithCtx(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
		defer cancel()
		calls := 0
		err := Paced(ctx, time.Second, 3, func() error {
			calls++
			time.Sleep(time.Second) // rests 3 s after each
			return nil
		})
		if err != nil || calls != 1 {
			t.Fatalf("Paced returned %v after %d calls, want nil after 1 (at 1 s; the next was due at 5 s, after the ctx ended at 4 s)", err, calls)
		}
	})
}
