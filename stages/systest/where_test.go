package systest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/stages/node"
	"github.com/tally-dev/tally/stages/systest/rig"
)

// TestGetsAskEachTallyd: with two tallyd sharing the partitions, the Go client's gets
// ask each tallyd for the ids of its own partitions (tally.get.post.at.<token>), once
// it has learned where they are, and nothing of tally.get.post: no tallyd asks another
// for a client's get (tally.part.>). When one tallyd leaves and hands its partitions
// over while gets go on, no get counts an id wrong, and the gets go to the one left.
// Before, every get went to tally.get.post and the tallyd it reached asked the other.
func TestGetsAskEachTallyd(t *testing.T) {
	const partitions = 8
	url, c := rig.NATSServer(t)
	start := func() *node.Node {
		return rig.StartJoiner(t, url, func(cfg *node.Config) {
			cfg.Partitions, cfg.BackupEvery, cfg.LeaseTTL = partitions, 200*time.Millisecond, time.Second
		})
	}
	a := start()
	defer a.Close()
	b := start()
	defer b.Close()
	rig.Eventually(t, "two tallyd share the partitions", func() (bool, string) {
		return len(a.Parts()) == partitions/2 && len(b.Parts()) == partitions/2, fmt.Sprint(a.Parts(), b.Parts())
	})
	g := &gen{r: rand.New(rand.NewPCG(3, 4)), users: 200, posts: 200}
	for chunk, total := 0, 4000; total > 0; chunk++ {
		publishRetrying(t, c, "ge."+strconv.Itoa(chunk), g.chunk(&total, 200, 200))
	}
	rig.WaitCaughtUp(t, c)
	compare(t, c, g)
	ctx := context.Background()
	var posts []uint64
	for p := range g.posts {
		posts = append(posts, uint64(1<<41+p))
	}
	truth, err := c.Get(ctx, "post", posts...) // exact: compare checked them
	if err != nil || len(truth.Unavailable) > 0 {
		t.Fatalf("the counts: %v, unavailable %v", err, truth.Unavailable)
	}

	spy, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer spy.Close()
	var mu sync.Mutex
	asked := map[string]int{}
	tokens := map[string]bool{}
	if _, err := spy.Subscribe(">", func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case m.Subject == "tally.get.post":
			asked["get"]++
		case strings.HasPrefix(m.Subject, "tally.get.post.at."):
			asked["at"]++
			tokens[strings.TrimPrefix(m.Subject, "tally.get.post.at.")] = true
		case strings.HasPrefix(m.Subject, "tally.part.post."):
			asked["part"]++
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(5, 6))
	// gets asks n gets of 20 random posts, and returns how many ids were unavailable;
	// a count other than the truth fails the test.
	gets := func(what string, n int) (unavailable int, failed []error) {
		for range n {
			at := make([]int, 20)
			ids := make([]uint64, 20)
			for i := range at {
				at[i] = r.IntN(len(posts))
				ids[i] = posts[at[i]]
			}
			got, err := c.Get(ctx, "post", ids...)
			if err != nil {
				failed = append(failed, err)
				continue
			}
			for i, k := range at {
				if got.Counts[i] == nil {
					unavailable++
				} else if !slices.Equal(got.Counts[i], truth.Counts[k]) {
					t.Errorf("%s: post %d counted %v, want %v", what, posts[k], got.Counts[i], truth.Counts[k])
				}
			}
		}
		return unavailable, failed
	}
	// took is what the gets since the last call asked, once the spy has seen them.
	took := func() (map[string]int, int) {
		if err := spy.Flush(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		got, n := asked, len(tokens)
		asked, tokens = map[string]int{}, map[string]bool{}
		return got, n
	}

	// learn asks gets until one asks nothing of tally.get.post: where the partitions are
	// served is learned from the tallyd a get reaches, which may not know the other's
	// partitions yet (it learns them as it asks them), so it takes a get or two.
	learn := func() {
		t.Helper()
		for i := 0; ; i++ {
			gets("learning", 1)
			if got, _ := took(); got["get"] == 0 {
				return
			}
			if i == 10 {
				t.Fatal("10 gets, and every one asked tally.get.post")
			}
		}
	}
	learn()
	if un, failed := gets("learned", 50); un > 0 || len(failed) > 0 {
		t.Fatalf("50 gets: %d ids unavailable, failed %v", un, failed)
	}
	if got, n := took(); got["get"] > 0 || got["part"] > 0 || got["at"] < 50 || n != 2 {
		t.Fatalf("50 gets asked %v of %d tallyd: want each tallyd directly, nothing of tally.get.post or tally.part", got, n)
	}

	// a leaves: its partitions are handed over to b while gets go on.
	done := make(chan struct{})
	var un, n int
	var failed []error
	go func() {
		defer close(done)
		for ; len(a.Parts()) > 0 || len(b.Parts()) < partitions; n++ {
			u, f := gets("in the hand-over", 1)
			un, failed = un+u, append(failed, f...)
		}
	}()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	<-done
	t.Logf("%d gets through the hand-over: %d ids unavailable, %d failed %v", n, un, len(failed), failed)
	for _, err := range failed {
		if !errors.Is(err, client.ErrUnavailable) {
			t.Errorf("a get in the hand-over failed: %v", err)
		}
	}
	rig.RetryUnavailable(t, "every partition answering", func() error {
		got, err := c.Get(ctx, "post", posts...)
		if err == nil && len(got.Unavailable) > 0 {
			err = fmt.Errorf("%w: %d ids", client.ErrUnavailable, len(got.Unavailable))
		}
		return err
	})
	learn()
	if un, failed := gets("after the hand-over", 50); un > 0 || len(failed) > 0 {
		t.Fatalf("50 gets after the hand-over: %d ids unavailable, failed %v", un, failed)
	}
	if got, n := took(); got["get"] > 0 || got["part"] > 0 || got["at"] < 50 || n != 1 {
		t.Fatalf("50 gets after the hand-over asked %v of %d tallyd: want the one left directly", got, n)
	}
}
