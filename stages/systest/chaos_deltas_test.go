package systest

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/stages/hop"
)

// deltaRecorder notes every delta batch a chaos child publishes — its message id and a
// hash of its deltas in a canonical order — in a file the children share
// (TALLY_CHAOS_DELTAS, set with TALLY_CHAOS_EACH): chaosDeltaNumbers finds a batch number
// sent with two contents, of which a counter partition applies only the first it gets
// (a count lost, or counted twice). It wraps what the faults wrap: it sees what is
// actually sent.
type deltaRecorder struct {
	hop.Publisher
	mu sync.Mutex
	f  *os.File
}

func (r *deltaRecorder) PublishMsgAsync(msg *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	if id := msg.Header.Get(jetstream.MsgIDHeader); strings.HasPrefix(id, "d.") {
		var b pipeline.DeltaBatch
		if err := pipeline.DecodeDeltaBatch(msg.Data, &b); err == nil {
			line := fmt.Sprintf("%s %016x %d\n", id, deltaHash(&b), os.Getpid())
			r.mu.Lock()
			_, _ = r.f.WriteString(line) // O_APPEND: a short line lands whole
			r.mu.Unlock()
		}
	}
	return r.Publisher.PublishMsgAsync(msg, opts...)
}

// StreamNameBySubject forwards to the wrapped Publisher, as hoptest's does.
func (r *deltaRecorder) StreamNameBySubject(ctx context.Context, subject string) (string, error) {
	if sf, ok := r.Publisher.(hop.StreamFinder); ok {
		return sf.StreamNameBySubject(ctx, subject)
	}
	return "", errors.New("not a stream finder")
}

// deltaHash hashes what b changes, in an order that does not depend on how it was built.
func deltaHash(b *pipeline.DeltaBatch) uint64 {
	ds := slices.Clone(b.Deltas)
	slices.SortFunc(ds, func(x, y pipeline.Delta) int {
		return cmp.Or(cmp.Compare(x.ID, y.ID), cmp.Compare(x.Field, y.Field), cmp.Compare(x.Op, y.Op), cmp.Compare(x.N, y.N))
	})
	ws := slices.Clone(b.Windows)
	slices.SortFunc(ws, func(x, y pipeline.WindowDelta) int { return strings.Compare(fmt.Sprint(x), fmt.Sprint(y)) })
	h := fnv.New64a()
	fmt.Fprint(h, b.Source, b.Seq, ds, ws)
	return h.Sum64()
}

// chaosDeltaNumbers reads the children's notes (deltaRecorder) and returns how many
// batch numbers were sent, and each sent with more than one content.
func chaosDeltaNumbers(path string) (int, []string, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, nil, err
	}
	defer f.Close()
	sent := map[string]map[string]string{} // id → hash → the first process that sent it
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 3 {
			continue
		}
		if sent[fs[0]] == nil {
			sent[fs[0]] = map[string]string{}
		}
		if _, ok := sent[fs[0]][fs[1]]; !ok {
			sent[fs[0]][fs[1]] = fs[2]
		}
	}
	var two []string
	for id, hs := range sent {
		if len(hs) > 1 {
			two = append(two, fmt.Sprintf("%s: %d contents (by processes %v)", id, len(hs), slices.Sorted(maps.Values(hs))))
		}
	}
	slices.Sort(two)
	return len(sent), two, sc.Err()
}

// TestChaosDeltaNumbers: a batch number noted with two contents is reported, one noted
// twice with the same content (a re-send) is not.
func TestChaosDeltaNumbers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "deltas")
	lines := "d.1.post.0.7 00000000000000aa 101\nd.1.post.0.7 00000000000000aa 102\n" +
		"d.2.user.3.9 00000000000000bb 101\nd.2.user.3.9 00000000000000cc 103\n"
	if err := os.WriteFile(path, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	n, two, err := chaosDeltaNumbers(path)
	if err != nil || n != 2 || len(two) != 1 || !strings.HasPrefix(two[0], "d.2.user.3.9: 2 contents (by processes [101 103])") {
		t.Fatalf("%d numbers, with two contents %q, %v; want 2 numbers, d.2.user.3.9 by 101 and 103", n, two, err)
	}
}
