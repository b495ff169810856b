package hot_test

import (
	"bytes"
	"compress/gzip"
	"io"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/tally-dev/tally/store"
	"github.com/tally-dev/tally/store/hot"
	"github.com/tally-dev/tally/store/storetest"
)

// oldSnapshot is a version 2 snapshot written by the table before fences (568d40a), of
// the ids compatIDs makes.
const oldSnapshot = "testdata/snapshot-v2-568d40a.gz"

// compatIDs returns two counters for each of about 18 000 ids in three groups: 1 000
// spread over a group (run lengths), 400 in one second (runs too long for bytes) and
// 16 500 in 30 seconds (many ids a second: a fine fence); a few counters escape 16 bits.
func compatIDs() *store.Map {
	r := rand.New(rand.NewPCG(11, 12))
	m := store.NewMap(2)
	add := func(gk uint64, buckets uint64, n int) {
		for range n {
			id := gk<<40 | r.Uint64N(buckets)<<32 | uint64(r.Uint32())
			v := []uint64{1 + r.Uint64N(300), r.Uint64N(3)}
			if r.IntN(50) == 0 {
				v[1] = 70_000 + r.Uint64N(1<<30)
			}
			m.Put(id, v)
		}
	}
	add(400_000, 256, 1000)
	add(400_001, 1, 400)
	add(400_002, 30, 16_500)
	return m
}

// TestOldSnapshot loads a snapshot that the table before fences wrote (its format is
// unchanged: fences are rebuilt at load) and checks every count, the fences built, and a
// round trip through the current writer.
func TestOldSnapshot(t *testing.T) {
	want := compatIDs()
	if path := os.Getenv("HOT_WRITE_OLD_SNAPSHOT"); path != "" {
		writeSnapshot(t, want, path) // run in a checkout of the old code
	}
	f, err := os.Open(oldSnapshot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	tb := hot.New(2)
	if _, err := tb.ReadFrom(bytes.NewReader(data)); err != nil {
		t.Fatalf("loading the old snapshot: %v", err)
	}
	storetest.Equal(t, tb, want)
	if runs, coarse, fine, _ := hot.Layout(tb); runs != 1 || coarse != 1 || fine != 1 {
		t.Fatalf("loaded groups indexed by runs %d, coarse fences %d, fine fences %d, want one each", runs, coarse, fine)
	}
	roundTrip(t, tb)
	storetest.Equal(t, tb, want)
	var again bytes.Buffer
	if _, err := tb.WriteTo(&again); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again.Bytes(), data) {
		t.Fatalf("the table writes %d bytes where the old one wrote %d for the same ids", again.Len(), len(data))
	}
}

func writeSnapshot(t *testing.T, m *store.Map, path string) {
	t.Helper()
	tb := hot.New(2)
	m.Range(func(id uint64, c []uint64) bool { tb.Put(id, c); return true })
	var buf bytes.Buffer
	if _, err := tb.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	var z bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&z, gzip.BestCompression)
	zw.Write(buf.Bytes())
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, z.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}
