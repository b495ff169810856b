package systest

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/stages/node"
	"github.com/tally-dev/tally/stages/systest/rig"
)

// BenchmarkBatchKeys is events applied per second of the same likes mix published two
// ways, side by side: split by partition, one message per partition (what the Go client
// does), and unsplit, as a client that does not know the partition function sends them:
// 1 000 events per message on tally.ev.batch.<n>, whatever their keys. The stage that
// receives an event of another partition hands it over in one hop batch per destination
// per transaction, so unsplit batches stay batches.
// Run: go test ./stages/systest -run XXX -bench BatchKeys -benchtime 200000x
func BenchmarkBatchKeys(b *testing.B) {
	b.Run("split", func(b *testing.B) { benchKeys(b, true) })
	b.Run("unsplit", func(b *testing.B) { benchKeys(b, false) })
}

func benchKeys(b *testing.B, split bool) {
	_, c := rig.StartNode(b, func(c *node.Config) { c.Partitions, c.FlushInterval = 16, 100*time.Millisecond })
	evs, want := benchEvents(b.N)
	ctx := context.Background()
	nc, err := nats.Connect(c.Conn().ConnectedUrl())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	b.ResetTimer()
	var futures []jetstream.PubAckFuture
	for i := 0; i < len(evs); {
		if split { // about benchBatch events per partition's message
			chunk := evs[i:min(i+16*benchBatch, len(evs))]
			if err := c.PublishBatch(ctx, "keys."+strconv.Itoa(i), chunk); err != nil {
				b.Fatal(err)
			}
			i += len(chunk)
			continue
		}
		chunk := evs[i:min(i+benchBatch, len(evs))]
		data, err := pipeline.Marshal(&pipeline.Batch{Events: chunk}, false)
		if err != nil {
			b.Fatal(err)
		}
		f, err := js.PublishAsync(c.Subjects().Event(pipeline.TypeBatch, pipeline.ID(i)), data, jetstream.WithMsgID("keys."+strconv.Itoa(i)))
		if err != nil {
			b.Fatal(err)
		}
		futures = append(futures, f)
		i += len(chunk)
	}
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			b.Fatal(err)
		}
	}
	rig.WaitCaughtUp(b, c)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	checkBench(b, c, want)
}
