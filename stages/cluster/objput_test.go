package cluster

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline/natstest"
)

// putObject stores objects nats.go's object store reads back whole and checks by digest,
// across many chunks and at the edges of one.
func TestPutObjectReadsBack(t *testing.T) {
	js, err := jetstream.New(natstest.Connect(t, natstest.Start(t)))
	if err != nil {
		t.Fatal(err)
	}
	obs, err := js.CreateObjectStore(t.Context(), jetstream.ObjectStoreConfig{Bucket: "STATE"})
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, size := range []int{0, 1, 128 << 10, 128<<10 + 1, 3<<20 + 17} {
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(r.Uint32())
		}
		name := "piece." + string(rune('a'+size%26))
		info, err := putObject(t.Context(), js, "STATE", jetstream.ObjectMeta{Name: name, Metadata: map[string]string{"pos": "1"}}, bytes.NewReader(data))
		if err != nil {
			t.Fatalf("%d bytes: %v", size, err)
		}
		got, err := obs.GetBytes(t.Context(), name)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%d bytes read back as %d (%v)", size, len(got), err)
		}
		stored, err := obs.GetInfo(t.Context(), name)
		if err != nil || stored.Size != uint64(size) || stored.Chunks != info.Chunks || stored.Digest != info.Digest || stored.Metadata["pos"] != "1" {
			t.Fatalf("%d bytes: info %+v (%v), put said %+v", size, stored, err, info)
		}
	}
}
