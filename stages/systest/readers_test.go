package systest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/natstest"
	"github.com/tally-dev/tally/stages/node"
	"github.com/tally-dev/tally/stages/systest/rig"
)

// A process that starts behind a backlog of large batches drains it without NATS ever
// cutting a connection of its off as a slow consumer. Each partition's reader pulls up
// to the largest payload (8 MiB) and, with a backlog, the server sends all of it at
// once: sixteen readers on the process's one connection had 96 MiB of it queued here,
// past the 64 MiB a server holds for one connection (max_pending), whenever the process
// read its socket slower than the server wrote — always, through this proxy that passes
// 32 MiB/s a connection; a 2 M-event backlog in this process did so by itself (its
// publishes and log appends failing for seconds, partitions stopped and replayed).
func TestBacklogDrainsWithoutSlowConsumers(t *testing.T) {
	s, js := streamsServer(t)
	ctx := context.Background()
	sc := pipeline.DefaultStreamConfig()
	// Six batches of 1 MiB a partition (a few views each, padded with spaces: the
	// server sends whole messages, and a pull of 8 MiB takes all six).
	const perPart, size = 6, 1 << 20
	views := map[uint64]uint64{}
	for p := range sc.Partitions {
		var posts []uint64
		for id := uint64(1); len(posts) < 3; id++ {
			if pipeline.PartitionOf(pipeline.ID(id), sc.Partitions) == p {
				posts = append(posts, id)
			}
		}
		for b := range perPart {
			var evs []pipeline.Event
			for i, id := range posts {
				evs = append(evs, pipeline.Event{Type: "view", Post: pipeline.ID(id), N: int64(1 + b + i)})
				views[id] += uint64(1 + b + i)
			}
			data, err := json.Marshal(pipeline.Batch{Events: evs})
			if err != nil {
				t.Fatal(err)
			}
			data = append(data[:len(data)-1], strings.Repeat(" ", size-len(data))+"}"...)
			m := nats.NewMsg(sc.Subjects.Event(pipeline.TypeBatch, evs[0].Key()))
			m.Data = data
			m.Header.Set("Content-Type", "application/json")
			if _, err := js.PublishMsg(ctx, m, jetstream.WithMsgID(fmt.Sprintf("pad-%d-%d", p, b))); err != nil {
				t.Fatal(err)
			}
		}
	}
	url := natstest.Throttled(t, s.ClientURL(), 32<<20)
	n, c := rig.StartNode(t, func(c *node.Config) { c.NATSURL = url; c.Partitions = sc.Partitions })
	ids := make([]uint64, 0, len(views))
	for id := range views {
		ids = append(ids, id)
	}
	drained(t, n, c, ids, time.Minute, func(r *pipeline.GetReply) error {
		for i, id := range ids {
			if r.Counts[i][3] != views[id] {
				return fmt.Errorf("post %d: %d views, want %d", id, r.Counts[i][3], views[id])
			}
		}
		return nil
	})
	vz, err := s.Varz(&server.VarzOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if vz.SlowConsumers != 0 || n.NATSDisconnects.Load() != 0 {
		t.Errorf("NATS cut %d connections off as slow consumers (%+v); tallyd lost its connections %d times", vz.SlowConsumers, vz.SlowConsumersStats, n.NATSDisconnects.Load())
	}
}
