package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff is the pause before each next retry: decorrelated jitter (each pause drawn at
// random between the least and three times the last, capped at the most), which grows
// about as fast as doubling but spreads retries that started together. A Backoff is used
// by one goroutine.
type Backoff struct {
	min, max, last time.Duration
}

// New returns a Backoff whose pauses are between lo and hi; lo is at least a
// microsecond and hi at least lo.
func New(lo, hi time.Duration) *Backoff {
	lo = max(lo, time.Microsecond)
	return &Backoff{min: lo, max: max(hi, lo), last: lo}
}

// Next returns the next pause.
func (b *Backoff) Next() time.Duration {
	hi := b.max
	if b.last < b.max/3 { // 3*last cannot overflow
		hi = max(b.min, 3*b.last)
	}
	d := b.min
	if hi > b.min {
		d += rand.N(hi - b.min + 1)
	}
	b.last = d
	return d
}

// Reset starts again from the least pause, after a success: the next is drawn between
// it and three times it, so that even first retries are spread.
func (b *Backoff) Reset() { b.last = b.min }

// Wait pauses for Next, or until ctx ends, whose error it returns then.
func (b *Backoff) Wait(ctx context.Context) error {
	_, err := b.WaitOr(ctx, nil)
	return err
}

// WaitOr is Wait that also ends, reporting woken, once wake is ready (nil: never).
func (b *Backoff) WaitOr(ctx context.Context, wake <-chan struct{}) (woken bool, err error) {
	t := time.NewTimer(b.Next())
	defer t.Stop()
	select {
	case <-t.C:
		return false, nil
	case <-ctx.Done():
		return false, ctx.Err()
	case <-wake:
		return true, nil
	}
}
