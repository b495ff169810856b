package systest

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline"
)

// idIn returns the first id from from on whose key lands in partition p of parts.
func idIn(parts, p int, from uint64) uint64 {
	for id := from; ; id++ {
		if pipeline.PartitionOf(pipeline.ID(id), parts) == p {
			return id
		}
	}
}

// publishUnsplit publishes evs as one batch not split by partition, as a producer in
// another language may: stored where key lands, deduplicated by id.
func publishUnsplit(t testing.TB, js jetstream.JetStream, sj pipeline.Subjects, key pipeline.ID, id string, evs []pipeline.Event) {
	t.Helper()
	data, err := pipeline.Marshal(&pipeline.Batch{Events: evs}, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(context.Background(), sj.Event(pipeline.TypeBatch, key), data, jetstream.WithMsgID(id)); err != nil {
		t.Fatal(err)
	}
}
