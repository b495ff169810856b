package natstest

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline"
)

// State starts a server with Tally's streams (of partitions partitions, default prefix)
// and its state bucket, for tests of what moves partitions between processes.
func State(t testing.TB, partitions int) (jetstream.JetStream, jetstream.ObjectStore, pipeline.Subjects) {
	t.Helper()
	js, err := jetstream.New(Connect(t, Start(t)))
	if err != nil {
		t.Fatal(err)
	}
	sc := pipeline.DefaultStreamConfig()
	sc.Partitions = partitions
	if err := pipeline.Setup(t.Context(), js, sc); err != nil {
		t.Fatal(err)
	}
	obs, err := js.CreateObjectStore(t.Context(), jetstream.ObjectStoreConfig{Bucket: sc.Subjects.StateBucket()})
	if err != nil {
		t.Fatal(err)
	}
	return js, obs, sc.Subjects
}
