package pipeline_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/natstest"
)

// The events stream's retention is the configured one when set, and otherwise survives
// a restart as the operator left it (nats stream edit --max-age).
func TestEventsMaxAge(t *testing.T) {
	js, _ := jetstream.New(natstest.Connect(t, natstest.Start(t)))
	ctx := context.Background()
	cfg := pipeline.DefaultStreamConfig()
	cfg.EventsMaxAge = 0
	age := func(want time.Duration) {
		t.Helper()
		if err := pipeline.Setup(ctx, js, cfg); err != nil {
			t.Fatal(err)
		}
		st, err := js.Stream(ctx, cfg.Subjects.EventsStream())
		if err != nil {
			t.Fatal(err)
		}
		if got := st.CachedInfo().Config.MaxAge; got != want {
			t.Fatalf("events kept %v, want %v", got, want)
		}
	}
	age(pipeline.DefaultEventsMaxAge) // a new stream
	st, _ := js.Stream(ctx, cfg.Subjects.EventsStream())
	edited := st.CachedInfo().Config
	edited.MaxAge = 36 * time.Hour
	if _, err := js.UpdateStream(ctx, edited); err != nil {
		t.Fatal(err)
	}
	age(36 * time.Hour) // a restart keeps the operator's edit
	cfg.EventsMaxAge = 24 * time.Hour
	age(24 * time.Hour) // --events-max-age wins
}
