package event

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// FuzzStage drives whatever a producer may publish — any type token, any payload —
// through a running stage: decode, apply, commit, log and publish. The property is the
// one a partition lives by: whatever comes in, the stage does not stop and its lag
// returns to 0 (what cannot be applied or published is dead-lettered). The seeds are
// the inputs that stopped a partition before (issue 13, finding 1) and their kin.
func FuzzStage(f *testing.F) {
	for _, seed := range []struct {
		typ  string
		data string
	}{
		{"like", `{"uid":7,"post":42,"owner":3}`},
		{"read", `{"uid":3,"kinds":["LIKE"]}`},
		{"read", `{"uid":3,"kinds":["Feed","SYSTEM","dm"]}`},
		{"incr", `{"family":"post","id":5,"field":"like","n":-3}`},
		{"incr", `{"family":"nope","id":5,"field":"like","n":1}`},
		{"batch", `{"events":[{"type":"system","id":1},{"type":"like","uid":1,"post":2},{"type":"follow","uid":1,"target":1}]}`},
		{"batch", `{"events":[{"type":"notify","uid":1,"target":2}]}`},
		{"hop", `{"src":0,"seq":1,"events":[{"type":"like","uid":1,"post":2}]}`},
		{"hop", "\x93\x01\x02\x03"},
		{"system", `{"id":9}`},
		{"view", `{"post":1,"n":4294967296}`},
		{"poke", `{}`},
		{"like", "\xff\xfe garbage"},
	} {
		f.Add(seed.typ, []byte(seed.data))
	}
	f.Fuzz(func(t *testing.T, typ string, data []byte) {
		if len(data) == 0 {
			return
		}
		h := newLogHarness(t)
		r := h.start("fuzz", nil)
		msg := &nats.Msg{Subject: fmt.Sprintf("%s.ev.%s.1", h.sj.Prefix, typ), Data: data,
			Header: nats.Header{jetstream.MsgIDHeader: []string{"f1"}}}
		if _, err := h.js.PublishMsg(context.Background(), msg); err != nil {
			return // not a subject or payload NATS takes: nothing reached the stage
		}
		deadline := time.Now().Add(15 * time.Second)
		for {
			select {
			case err := <-r.done:
				r.done <- err
				t.Fatalf("the stage stopped on %s %q: %v", typ, data, err)
			default:
			}
			lag, err := r.Lag(context.Background())
			if err == nil && lag == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("lag %d (err %v) 15 s after %s %q", lag, err, typ, data)
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}
