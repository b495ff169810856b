package cluster

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline/natstest"
)

// BenchmarkView reads the ownership bucket as a round does (Owners.View): three
// members and 16 leases held, on a three-server cluster with the bucket's three
// replicas, as tallyd --join runs it.
// Run: go test ./stages/cluster -run XXX -bench View
func BenchmarkView(b *testing.B) {
	cl := natstest.StartCluster(b, 3)
	nc, err := nats.Connect(cl.URLs())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	ctx := b.Context()
	bucket := Bucket{Name: "TALLY_OWNERS", Replicas: 3}
	var ows []*Owners
	for range 3 {
		o, err := Open(ctx, js, bucket, b.TempDir(), time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		if err := o.Register(ctx); err != nil {
			b.Fatal(err)
		}
		ows = append(ows, o)
	}
	leases := make([]string, 16)
	for p := range leases {
		leases[p] = fmt.Sprint("counters.", p)
		if _, err := ows[p%3].Take(ctx, leases[p]); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		v, err := ows[0].View(ctx, leases...)
		if err != nil {
			b.Fatal(err)
		}
		if len(v.Members) != 3 || len(v.Holders) != len(leases) {
			b.Fatalf("view: %d members, %d holders", len(v.Members), len(v.Holders))
		}
	}
}

// TestViewLists: on a real bucket, a View finds every live member and every lease held
// from one listing of the bucket's subjects (no lease named), a member that left is no
// longer live, and Alone says whether another process is.
func TestViewLists(t *testing.T) {
	js := bucketJS(t)
	ctx := t.Context()
	var ows []*Owners
	for range 2 {
		o, err := Open(ctx, js, Bucket{Name: "TALLY_OWNERS"}, t.TempDir(), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := o.Register(ctx); err != nil {
			t.Fatal(err)
		}
		ows = append(ows, o)
	}
	if _, err := ows[1].Take(ctx, "counters.3"); err != nil {
		t.Fatal(err)
	}
	v, err := ows[0].View(ctx)
	if err != nil || len(v.Members) != 2 || v.Holders["counters.3"] != ows[1].ID() {
		t.Fatalf("view of two members, one holding counters.3: %+v, %v", v, err)
	}
	if err := ows[0].Alone(ctx); !errors.Is(err, ErrOwned) {
		t.Fatalf("Alone with another member live: %v, want ErrOwned", err)
	}
	if err := ows[1].Leave(ctx); err != nil {
		t.Fatal(err)
	}
	v, err = ows[0].View(ctx)
	if err != nil || !slices.Equal(v.Members, []string{ows[0].ID()}) {
		t.Fatalf("view after the other left: members %v, %v", v.Members, err)
	}
	if err := ows[0].Alone(ctx); err != nil {
		t.Fatalf("Alone after the other left: %v", err)
	}
}
