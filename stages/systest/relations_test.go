package systest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/stages/node"
	"github.com/tally-dev/tally/stages/systest/rig"
)

// relRig publishes as a client in any language may: batches not split by partition
// (JSON or MessagePack) on one partition's batch subject, which a backlog holds back,
// events sent one by one on their own subjects, and batches split by partition.
type relRig struct {
	t      *testing.T
	c      *client.Client
	js     jetstream.JetStream
	lagKey pipeline.ID // routes to the partition held back
	tx     int
}

func (r *relRig) nextTx() string { r.tx++; return fmt.Sprintf("rp.%d", r.tx) }

// unsplit publishes evs in one batch on the held-back partition's subject.
func (r *relRig) unsplit(evs []pipeline.Event, asJSON bool) {
	r.t.Helper()
	data, err := pipeline.Marshal(&pipeline.Batch{Events: evs}, asJSON)
	if err != nil {
		r.t.Fatal(err)
	}
	if _, err := r.js.Publish(context.Background(), r.c.Subjects().Event("batch", r.lagKey), data, jetstream.WithMsgID(r.nextTx())); err != nil {
		r.t.Fatal(err)
	}
}

// direct publishes evs one by one, each on its own subject.
func (r *relRig) direct(evs ...pipeline.Event) {
	r.t.Helper()
	for i := range evs {
		evs[i].Tx = r.nextTx()
	}
	if err := r.c.Publish(context.Background(), evs...); err != nil {
		r.t.Fatal(err)
	}
}

// backlog holds the partition back: views of one post, n events in batches of 1000.
func (r *relRig) backlog(n int) {
	r.t.Helper()
	for n > 0 {
		evs := make([]pipeline.Event, min(n, 1000))
		for i := range evs {
			evs[i] = pipeline.Event{Type: "view", Post: r.lagKey, N: 1}
		}
		n -= len(evs)
		r.unsplit(evs, false)
	}
}

// TestRelationsByPlace: a relation's events end as applied in the events stream's order,
// whichever road brings each: a like in a batch stored on another (held-back)
// partition's subject, forwarded to the user's partition after that partition drains
// its backlog, and its unlike sent directly after the batch was stored, applied first;
// the mirror cases; follows and comments the same; then random interleavings of
// unsplit, direct and split events over few users and posts, so that every relation is
// made and undone while its hop is in flight. Counts, liked, unread and every list must
// equal the reference model of the stored stream.
func TestRelationsByPlace(t *testing.T) {
	const P = 16
	_, c := rig.StartNode(t, func(c *node.Config) { c.Partitions = P })
	js, err := jetstream.New(c.Conn())
	if err != nil {
		t.Fatal(err)
	}
	const lagging = 5
	key := func(p int, skip int) pipeline.ID { // the skip-th id of partition p
		for id := pipeline.ID(1); ; id++ {
			if pipeline.PartitionOf(id, P) == p {
				if skip == 0 {
					return id
				}
				skip--
			}
		}
	}
	r := &relRig{t: t, c: c, js: js, lagKey: key(lagging, 0)}
	// Users and posts of the other partitions.
	var users []pipeline.ID
	for p := range P {
		if p != lagging {
			users = append(users, key(p, 1), key(p, 2))
		}
	}
	posts := []pipeline.ID{1 << 41, 1<<41 + 1, 1<<41 + 2, 1<<41 + 3, 1<<41 + 4, 1<<41 + 5}
	owner := func(p pipeline.ID) pipeline.ID { return users[int(p)%len(users)] }
	like := func(u, p pipeline.ID) pipeline.Event {
		return pipeline.Event{Type: "like", UID: u, Post: p, Owner: owner(p)}
	}
	unlike := func(u, p pipeline.ID) pipeline.Event { return pipeline.Event{Type: "unlike", UID: u, Post: p} }
	follow := func(u, v pipeline.ID) pipeline.Event { return pipeline.Event{Type: "follow", UID: u, Target: v} }
	unfollow := func(u, v pipeline.ID) pipeline.Event { return pipeline.Event{Type: "unfollow", UID: u, Target: v} }

	// The cases of the issue, each with a backlog before the batch.
	for i := range 4 {
		u, v, p := users[i], users[len(users)-1-i], posts[i]
		r.backlog(5000)
		r.unsplit([]pipeline.Event{like(u, p), follow(u, v)}, i%2 == 0) // liked and followed, late
		r.direct(unlike(u, p), unfollow(u, v))                          // then undone, directly
		u2 := users[i+4]
		r.direct(like(u2, p), follow(u2, v))
		r.backlog(5000)
		r.unsplit([]pipeline.Event{unlike(u2, p), unfollow(u2, v)}, i%2 == 1) // undone, late
		r.direct(like(u2, p), follow(u2, v))                                  // made again
	}

	// Random interleavings: every relation made and undone through every road.
	rnd := rand.New(rand.NewPCG(22, 1))
	pick := func() (pipeline.ID, pipeline.ID) { return users[rnd.IntN(8)], posts[rnd.IntN(len(posts))] }
	event := func() pipeline.Event {
		u, p := pick()
		switch n := rnd.IntN(100); {
		case n < 25:
			return like(u, p)
		case n < 45:
			return unlike(u, p)
		case n < 55:
			return pipeline.Event{Type: "comment", UID: u, Post: p, Comment: pipeline.ID(1 + rnd.IntN(3)), Owner: owner(p)}
		case n < 62:
			return pipeline.Event{Type: "uncomment", UID: u, Post: p, Comment: pipeline.ID(1 + rnd.IntN(3))}
		case n < 74:
			v := users[rnd.IntN(8)]
			if v == u {
				v = users[8]
			}
			return follow(u, v)
		case n < 84:
			return unfollow(u, users[rnd.IntN(9)])
		case n < 90:
			return pipeline.Event{Type: "post", UID: u, Post: p}
		case n < 95:
			return pipeline.Event{Type: "mention", UID: u, Target: users[rnd.IntN(8)]}
		default:
			return pipeline.Event{Type: "read", UID: u}
		}
	}
	for round := range 120 {
		if round%20 == 0 {
			r.backlog(3000)
		}
		evs := make([]pipeline.Event, 1+rnd.IntN(12))
		for i := range evs {
			evs[i] = event()
		}
		switch rnd.IntN(3) {
		case 0:
			r.unsplit(evs, rnd.IntN(2) == 0)
		case 1:
			r.direct(evs...)
		default:
			if err := c.PublishBatch(context.Background(), r.nextTx(), evs); err != nil {
				t.Fatal(err)
			}
		}
	}
	rig.WaitCaughtUp(t, c)

	ref := rig.StoredModel(t, c)
	if ref.Applied["unlike"] == 0 || ref.Applied["unfollow"] == 0 || ref.Applied["uncomment"] == 0 {
		t.Fatalf("the workload undid too little: %v", ref.Applied)
	}
	ids := func(in []pipeline.ID) []uint64 {
		out := make([]uint64, len(in))
		for i, id := range in {
			out[i] = uint64(id)
		}
		return out
	}
	rig.CheckReference(t, c, ref, ids(users), ids(posts), 1)
}
