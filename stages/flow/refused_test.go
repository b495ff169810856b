package flow_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/stages/flow"
)

// refusing is a JetStream that cannot give the stream: a stream without a leader, say.
type refusing struct {
	jetstream.JetStream
	asked int
}

var errNoLeader = errors.New("stream has no leader")

func (r *refusing) Stream(context.Context, string) (jetstream.Stream, error) {
	r.asked++
	return nil, errNoLeader
}

// A Reader NATS refuses its consumer tries again, and says so with the reason once it
// has tried for 10 s and every 30 s after: it said nothing, and a partition stuck for
// minutes behind a consumer it could not make was silent (TestChaosCluster, NATS cluster,
// seed 41, 12-01: eight counter partitions 233–501 deltas behind for two minutes, no
// line logged). It ends with its context, with the last reason.
func TestReadRefusedSaysWhy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out bytes.Buffer
		log := slog.New(slog.NewTextHandler(&out, nil))
		js := &refusing{}
		ctx, cancel := context.WithTimeout(t.Context(), 45*time.Second)
		defer cancel()
		_, err := flow.Read(ctx, js, "TALLY_DELTAS", "tally.delta.post.3", 7, flow.Buffer{Msgs: 8}, log)
		if !errors.Is(err, errNoLeader) {
			t.Fatalf("Read = %v, want the last reason (%v)", err, errNoLeader)
		}
		said := strings.Count(out.String(), "cannot read a stream yet")
		if said != 2 || !strings.Contains(out.String(), "stream has no leader") || !strings.Contains(out.String(), "tally.delta.post.3") {
			t.Fatalf("said %d times in 45 s (want 2: at 10 s and 40 s), with the subject and the reason:\n%s", said, out.String())
		}
		if js.asked < 20 {
			t.Fatalf("asked for the stream %d times in 45 s, want it asked again every 2 s at most", js.asked)
		}
	})
}
