package systest

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/stages/systest/rig"
)

// ask sends a $SRV request and gathers the answers of every instance of the service.
func ask[T any](t *testing.T, nc *nats.Conn, subject string, instances int) []T {
	t.Helper()
	inbox := nats.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest(subject, inbox, nil); err != nil {
		t.Fatal(err)
	}
	var out []T
	deadline := time.Now().Add(10 * time.Second)
	for len(out) < instances {
		m, err := sub.NextMsg(time.Until(deadline))
		if err != nil {
			t.Fatalf("%s: %d answers of %d: %v", subject, len(out), instances, err)
		}
		var v T
		if err := json.Unmarshal(m.Data, &v); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

// The query subjects are a NATS micro service: nats micro ls/info/stats see its
// endpoints, requests and errors.
func TestQueryService(t *testing.T) {
	n, c := rig.StartNode(t, nil)
	nc, err := nats.Connect(n.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx := context.Background()
	if _, err := c.Get(ctx, "post", 42); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, "posts", 42); !errors.Is(err, client.ErrUnknownFamily) {
		t.Fatalf("unknown family: %v", err)
	}
	const instances = 4 // query.Config.Workers's default
	infos := ask[micro.Info](t, nc, "$SRV.INFO.tally", instances)
	subjects := map[string]string{}
	for _, e := range infos[0].Endpoints {
		subjects[e.Name] = e.Subject
	}
	for name, subj := range map[string]string{"get": "tally.get.*", "liked": "tally.liked", "likes_user": "tally.likes.user", "unread": "tally.unread", "health": "tally.health"} {
		if subjects[name] != subj {
			t.Errorf("endpoint %s: subject %q, want %q (all: %v)", name, subjects[name], subj, subjects)
		}
	}
	if infos[0].Metadata["prefix"] != "tally" || infos[0].Version != pipeline.ServiceVersion {
		t.Errorf("info: %+v", infos[0])
	}
	var requests, errs int
	for _, st := range ask[micro.Stats](t, nc, "$SRV.STATS.tally", instances) {
		for _, e := range st.Endpoints {
			if e.Name == "get" {
				requests += e.NumRequests
				errs += e.NumErrors
			}
		}
	}
	if requests != 2 || errs != 1 {
		t.Errorf("get: %d requests, %d errors; want 2 and 1", requests, errs)
	}
}
