package flow

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// onChan lets a message onto a channel only while the bytes its user has not taken stay
// within the bound — at once onto an empty one, whatever its size — and learns what the
// user took from the channel's length alone.
func TestOnChanHoldsBackBeyondItsBytes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		ch := make(chan jetstream.Msg, 100)
		h := onChan{max: 100}
		send := func(n int) bool {
			if !h.wait(ctx, ch, n) {
				return false
			}
			ch <- nil
			return true
		}
		for _, n := range []int{40, 40, 20} { // 100 bytes: the bound, reached
			if !send(n) {
				t.Fatal("wait refused a message within the bound")
			}
		}
		done := make(chan bool)
		go func() { done <- send(10) }()
		synctest.Wait()
		select {
		case <-done:
			t.Fatalf("a message past the bound went on with %d bytes on the channel", h.bytes)
		default:
		}
		<-ch // the user takes the first 40 bytes: the 10 fit
		time.Sleep(10 * time.Millisecond)
		if ok := <-done; !ok || h.bytes != 70 || len(ch) != 3 {
			t.Fatalf("after a take: sent %v, %d bytes recorded on the channel with %d messages, want 70 and 3", ok, h.bytes, len(ch))
		}
		for len(ch) > 0 {
			<-ch
		}
		if !send(500) || h.bytes != 500 { // alone, anything goes on
			t.Fatalf("a message larger than the bound, onto an empty channel: %d bytes recorded", h.bytes)
		}
		go func() { done <- send(1) }()
		synctest.Wait()
		cancel() // stopping: the waiting message is dropped, not sent
		if ok := <-done; ok || len(ch) != 1 {
			t.Fatalf("stopped while waiting: sent %v, %d on the channel", ok, len(ch))
		}
	})
}
