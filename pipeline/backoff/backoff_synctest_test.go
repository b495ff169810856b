package backoff_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tally-dev/tally/pipeline/backoff"
)

// Waits grow from the least pause towards the cap, never past it, and are jittered: two
// retriers that start together do not wait in step.
func TestWaitsJitteredAndCapped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const lo, hi = 50 * time.Millisecond, 2 * time.Second
		ctx := context.Background()
		a, b := backoff.New(lo, hi), backoff.New(lo, hi)
		var inStep, atCapHalf int
		distinct := map[time.Duration]bool{}
		for i := range 200 {
			start := time.Now()
			if err := a.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			wa := time.Since(start)
			start = time.Now()
			if err := b.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			wb := time.Since(start)
			for _, w := range []time.Duration{wa, wb} {
				if w < lo || w > hi {
					t.Fatalf("wait %d: %v, want %v..%v", i, w, lo, hi)
				}
				if w > hi/2 {
					atCapHalf++
				}
				distinct[w] = true
			}
			if wa == wb {
				inStep++
			}
		}
		if inStep > 1 || len(distinct) < 300 {
			t.Errorf("not jittered: %d of 200 waits in step, %d distinct of 400", inStep, len(distinct))
		}
		// Drawn up to three times the last, about a quarter of the waits end above half
		// the cap once there (no fewer than 59 of 400 in 20 000 simulated runs).
		if atCapHalf < 20 {
			t.Errorf("waits do not grow towards the cap: %d of 400 above %v", atCapHalf, hi/2)
		}
		a.Reset()
		start := time.Now()
		_ = a.Wait(ctx)
		if w := time.Since(start); w < lo || w > 3*lo { // the first pause after a reset is drawn from the start
			t.Errorf("after Reset: %v, want %v..%v", w, lo, 3*lo)
		}
	})
}

// Wait ends with its context, returning its error.
func TestWaitEndsWithContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := backoff.New(time.Hour, time.Hour)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		if err := b.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != time.Second {
			t.Fatalf("Wait: %v after %v, want the deadline after 1s", err, time.Since(start))
		}
	})
}

// WaitOr ends when woken, reporting it, before its pause is over; and as Wait when not.
func TestWaitOrEndsWhenWoken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := backoff.New(time.Hour, time.Hour)
		wake := make(chan struct{})
		go func() {
			time.Sleep(time.Second)
			close(wake)
		}()
		start := time.Now()
		if woken, err := b.WaitOr(context.Background(), wake); !woken || err != nil || time.Since(start) != time.Second {
			t.Fatalf("WaitOr: woken %v, %v after %v; want woken after 1s", woken, err, time.Since(start))
		}
		b = backoff.New(time.Minute, time.Minute)
		start = time.Now()
		if woken, err := b.WaitOr(context.Background(), nil); woken || err != nil || time.Since(start) != time.Minute {
			t.Fatalf("WaitOr of nothing: woken %v, %v after %v; want the pause", woken, err, time.Since(start))
		}
	})
}

// Pauses stay within bounds for any bounds, however long the retries go on.
func TestNextBounds(t *testing.T) {
	f := func(lo, hi, wantLo, wantHi time.Duration) {
		t.Helper()
		b := backoff.New(lo, hi)
		for range 1000 {
			if d := b.Next(); d < wantLo || d > wantHi {
				t.Fatalf("New(%v, %v): %v, want %v..%v", lo, hi, d, wantLo, wantHi)
			}
		}
	}
	f(50*time.Millisecond, 2*time.Second, 50*time.Millisecond, 2*time.Second)
	f(0, 0, time.Microsecond, time.Microsecond)
	f(time.Second, time.Millisecond, time.Second, time.Second)
	f(time.Millisecond, time.Duration(1<<63-1), time.Millisecond, time.Duration(1<<63-1))
}
