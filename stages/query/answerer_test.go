package query

import (
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/tally-dev/tally/pipeline/natstest"
)

// fakeRequest is a request micro hands an endpoint, keeping what it is answered.
type fakeRequest struct {
	mu   sync.Mutex
	data []byte
}

func (r *fakeRequest) Respond(data []byte, _ ...micro.RespondOpt) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.data = data
	return nil
}
func (r *fakeRequest) RespondJSON(any, ...micro.RespondOpt) error { panic("not used") }
func (r *fakeRequest) Error(_, _ string, data []byte, _ ...micro.RespondOpt) error {
	return r.Respond(data)
}
func (r *fakeRequest) Data() []byte           { return []byte{0x80} } // an empty MessagePack map
func (r *fakeRequest) Headers() micro.Headers { return nil }
func (r *fakeRequest) Subject() string        { return "tally.test" }
func (r *fakeRequest) Reply() string          { return "_INBOX.test" }

func (r *fakeRequest) answered() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.data != nil
}

// TestAnswerersStay: a request is answered by an answerer that then waits for the next,
// so requests one after another are all answered by one goroutine, which ends once idle
// for answererIdle; requests at once start at most maxAnswering answerers, the rest
// answered on the instance's goroutine. Before, each request started a goroutine of its
// own, whose stack grew in each (3 % of a 20-id get's CPU).
func TestAnswerersStay(t *testing.T) {
	nc := natstest.Connect(t, natstest.Start(t)) // only asked its max_payload
	synctest.Test(t, func(t *testing.T) {
		s := &Server{nc: nc, log: slog.New(slog.DiscardHandler), cfg: Config{Timeout: time.Minute}, jobs: make(chan *job)}
		ep := s.endpoint("test", func(*request) (any, error) { return map[string]int{"n": 1}, nil })
		for i := range 50 {
			var r fakeRequest
			ep.Handle(&r)
			if !r.answered() {
				t.Fatalf("request %d not answered", i)
			}
			synctest.Wait() // its answerer waits for the next
		}
		if n := s.answerers.Load(); n != 1 {
			t.Fatalf("50 requests one after another left %d answerers, want 1", n)
		}
		time.Sleep(answererIdle)
		synctest.Wait()
		if n := s.answerers.Load(); n != 0 {
			t.Fatalf("%d answerers after %v idle, want 0", n, answererIdle)
		}

		// Requests at once, each answered after a minute: maxAnswering answerers, the rest
		// answered where they came.
		release := make(chan struct{})
		slow := s.endpoint("test", func(*request) (any, error) { <-release; return map[string]int{"n": 1}, nil })
		const more = 3
		rs := make([]fakeRequest, maxAnswering+more)
		var wg sync.WaitGroup
		for i := range rs {
			wg.Go(func() { slow.Handle(&rs[i]) })
		}
		synctest.Wait()
		if n := s.answerers.Load(); n != maxAnswering {
			t.Fatalf("%d requests at once started %d answerers, want %d", len(rs), n, maxAnswering)
		}
		close(release)
		wg.Wait()
		for i := range rs {
			if !rs[i].answered() {
				t.Fatalf("request %d of those at once not answered", i)
			}
		}
		time.Sleep(answererIdle)
		synctest.Wait()
		if n := s.answerers.Load(); n != 0 {
			t.Fatalf("%d answerers after %v idle, want 0", n, answererIdle)
		}
	})
}
