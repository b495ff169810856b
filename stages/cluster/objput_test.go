package cluster

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline/natstest"
)

// stateStore starts a NATS server and makes the object store bucket STATE on it.
func stateStore(t *testing.T) (jetstream.JetStream, jetstream.ObjectStore) {
	t.Helper()
	js, err := jetstream.New(natstest.Connect(t, natstest.Start(t)))
	if err != nil {
		t.Fatal(err)
	}
	obs, err := js.CreateObjectStore(t.Context(), jetstream.ObjectStoreConfig{Bucket: "STATE"})
	if err != nil {
		t.Fatal(err)
	}
	return js, obs
}

// putObject stores objects nats.go's object store reads back whole and checks by digest,
// across many chunks and at the edges of one.
func TestPutObjectReadsBack(t *testing.T) {
	js, obs := stateStore(t)
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

// A chunk answered "no responders" (its stream's leader lost for a moment) is not sent
// again after the chunks behind it: stored out of order, the object was refused by its
// digest when restored, and the partition whose current backup it was could not start
// anywhere (TestChaosCluster, seed 7). The put fails instead, and the caller's next
// backup stores it whole. Here the chunks' subjects leave the stream for a few chunks.
func TestPutObjectNotReordered(t *testing.T) {
	js, obs := stateStore(t)
	st, err := js.Stream(t.Context(), "OBJ_STATE")
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	subjects := func(ss ...string) {
		c := cfg
		c.Subjects = ss
		if _, err := js.UpdateStream(t.Context(), c); err != nil {
			t.Fatal(err)
		}
	}
	const chunk, chunks = 128 << 10, 40
	data := make([]byte, chunk*chunks)
	r := rand.New(rand.NewPCG(3, 4))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	read, away := 0, false
	back := func() {
		if away {
			subjects(cfg.Subjects...)
			away = false
		}
	}
	src := readFunc(func(p []byte) (int, error) {
		switch read {
		case 10 * chunk: // chunks 10 and 11 find no stream
			subjects("$O.STATE.M.>")
			away = true
		case 12 * chunk:
			back()
		}
		n := copy(p, data[read:])
		read += n
		if n == 0 {
			return 0, io.EOF
		}
		return n, nil
	})
	_, err = putObject(t.Context(), js, "STATE", jetstream.ObjectMeta{Name: "piece"}, src)
	back() // the put may have failed before reading chunk 12
	if err == nil {
		got, gerr := obs.GetBytes(t.Context(), "piece")
		t.Fatalf("the put went through chunks that found no stream; read back: %d bytes, %v", len(got), gerr)
	}
	if _, err := obs.GetInfo(t.Context(), "piece"); !errors.Is(err, jetstream.ErrObjectNotFound) {
		t.Fatalf("a failed put left an object: %v", err)
	}
	// The next put stores it whole.
	read = 0
	if _, err := putObject(t.Context(), js, "STATE", jetstream.ObjectMeta{Name: "piece"}, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if got, err := obs.GetBytes(t.Context(), "piece"); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes: %v", len(got), err)
	}
}

type readFunc func(p []byte) (int, error)

func (f readFunc) Read(p []byte) (int, error) { return f(p) }
