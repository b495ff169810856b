package systest

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/stages/systest/rig"
)

// TestViewers: the distinct viewers of posts with a few, hundreds and thousands of them
// (each of the sketch's forms), viewed in JSON batches not split by partition (so the
// views of a post reach it through hops), some batches sent twice, users viewing more
// than once, while tallyd is SIGKILLed twice: each post's viewers equal the reference
// model's — the sketch of the users the stored stream holds — exactly up to 128, and
// within 2 % of the users past that.
func TestViewers(t *testing.T) {
	bin := rig.Tallyd(t)
	ns := rig.StartNATS(t)
	p := rig.StartTallyd(t, bin, ns.URL(), "--backup-every", "1s", "--viewers")
	nc, err := nats.Connect(ns.URL(), nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c, err := client.New(nc, client.WithTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	// Post i is viewed by sizes[i] users, each one to three times.
	sizes := []int{1, 60, 128, 129, 700, 5_000, 20_000}
	var views []pipeline.Event
	for i, n := range sizes {
		for u := range n {
			for range 1 + u%3 {
				views = append(views, pipeline.Event{Type: "view", Post: pipeline.ID(1000 + i), UID: pipeline.ID(1 + u*7919)})
			}
		}
	}
	r := rand.New(rand.NewPCG(3, 4))
	r.Shuffle(len(views), func(i, j int) { views[i], views[j] = views[j], views[i] })
	const batch = 2_000
	for b, k := 0, 0; b < len(views); b, k = b+batch, k+1 {
		evs := views[b:min(b+batch, len(views))]
		data, err := pipeline.Marshal(&pipeline.Batch{Events: evs}, true)
		if err != nil {
			t.Fatal(err)
		}
		// under a key of another partition than most of its posts'; every fifth sent twice
		for range 1 + boolInt(k%5 == 0) {
			if _, err := js.Publish(ctx, c.Subjects().Event("batch", pipeline.ID(k)), data, jetstream.WithMsgID(fmt.Sprint("vb", k))); err != nil {
				t.Fatal(err)
			}
		}
		if k == 10 || k == 25 {
			p.Kill()
			p.Restart(t)
		}
	}
	rig.WaitCaughtUp(t, c)
	ref := rig.StoredModel(t, c, pipeline.WithViewers(pipeline.DefaultFamilies())...)
	for i, n := range sizes {
		post := uint64(1000 + i)
		want := ref.Counts("post", post)
		if ref.Viewers(post) != n {
			t.Fatalf("post %d: the model has %d viewers, %d were sent", post, ref.Viewers(post), n)
		}
		rig.RetryUnavailable(t, "viewers", func() error {
			got, err := c.Get(ctx, "post", post)
			if err != nil {
				return err
			}
			if fmt.Sprint(got.Counts[0]) != fmt.Sprint(want) {
				t.Errorf("post %d (%d viewers): tally %v, reference %v", post, n, got.Counts[0], want)
			}
			return nil
		})
		v := want[4]
		switch e := math.Abs(float64(v)-float64(n)) / float64(n); {
		case n <= pipeline.ExactViewers && v != uint64(n):
			t.Errorf("post %d: %d viewers counted %d, want exactly", post, n, v)
		case e > 0.02:
			t.Errorf("post %d: %d viewers counted %d, off by %.2f %%", post, n, v, 100*e)
		default:
			t.Logf("%6d viewers: counted %6d (%.3f %% off)", n, v, 100*e)
		}
	}
}
