package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/pipeline"
)

// Each kind of failure reaches the caller as a sentinel error, carried by the reply's
// code rather than guessed from its text.
func TestErrorsIs(t *testing.T) {
	c, stop := startTally()
	t.Cleanup(stop)
	nc := c.Conn()
	// A tallyd whose partitions are all being handed over answers like this one.
	reply, err := pipeline.Marshal(pipeline.GetReply{Error: "unavailable: no partition of post could answer", Code: pipeline.CodeUnavailable}, false)
	if err != nil {
		t.Fatal(err)
	}
	handover, err := nc.Subscribe("handover.get.post", func(m *nats.Msg) { _ = m.Respond(reply) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = handover.Unsubscribe() })
	inHandover, err := client.New(nc, client.WithPrefix("handover"))
	if err != nil {
		t.Fatal(err)
	}
	nobody, err := client.New(nc, client.WithPrefix("nobody"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		call func() error
		want error
	}{
		{"no ids", func() error { _, err := c.Get(ctx, "post"); return err }, client.ErrBadRequest},
		{"no uid", func() error { _, err := c.Liked(ctx, 0, 42); return err }, client.ErrBadRequest},
		{"unknown family", func() error { _, err := c.Get(ctx, "posts", 42); return err }, client.ErrUnknownFamily},
		{"no partition answers", func() error { _, err := inHandover.Get(ctx, "post", 42); return err }, client.ErrUnavailable},
		{"no tallyd", func() error { _, err := nobody.Get(ctx, "post", 42); return err }, client.ErrUnavailable},
		{"unknown list", func() error { _, err := c.List(ctx, "likes.nothing", 1, 10, ""); return err }, client.ErrBadRequest},
	} {
		err := tc.call()
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want errors.Is %v", tc.name, err, tc.want)
		}
		if err != nil && strings.Count(err.Error(), tc.want.Error()) != 1 {
			t.Errorf("%s: %q names %q other than once", tc.name, err, tc.want)
		}
		for _, other := range []error{client.ErrBadRequest, client.ErrUnknownFamily, client.ErrUnavailable} {
			if other != tc.want && errors.Is(err, other) {
				t.Errorf("%s: %v is also %v", tc.name, err, other)
			}
		}
	}
	// No tallyd at all is told at once by NATS ("no responders"), not waited out.
	if _, err := nobody.Get(ctx, "post", 42); !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("no tallyd: %v, want it to say no responders", err)
	}
	// What a nats CLI user sees: the code beside the text.
	m, err := nc.Request("tally.get.post", []byte(`{"ids":"42"}`), 5*time.Second)
	if err != nil || !strings.Contains(string(m.Data), `"code":"bad_request"`) {
		t.Fatalf("JSON reply to a bad request: %s %v", m.Data, err)
	}
}

func TestErrorCode(t *testing.T) {
	for _, sentinel := range []error{pipeline.ErrBadRequest, pipeline.ErrUnknownFamily, pipeline.ErrUnavailable} {
		code := pipeline.ErrorCode(errors.Join(errors.New("context"), sentinel))
		if got := pipeline.CodeError(code); got != sentinel {
			t.Errorf("%v: code %q comes back as %v", sentinel, code, got)
		}
	}
	if code := pipeline.ErrorCode(errors.New("disk on fire")); code != pipeline.CodeInternal || pipeline.CodeError(code) != nil {
		t.Errorf("an unclassified error: code %q", code)
	}
}
