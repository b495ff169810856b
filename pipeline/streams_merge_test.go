package pipeline_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/natstest"
)

// editStream changes a stream as an operator would with nats stream edit.
func editStream(t *testing.T, js jetstream.JetStream, name string, edit func(*jetstream.StreamConfig)) {
	t.Helper()
	ctx := context.Background()
	st, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	c := st.CachedInfo().Config
	edit(&c)
	if _, err := js.UpdateStream(ctx, c); err != nil {
		t.Fatalf("edit %s: %v", name, err)
	}
}

func streamConfig(t *testing.T, js jetstream.JetStream, name string) jetstream.StreamConfig {
	t.Helper()
	st, err := js.Stream(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return st.CachedInfo().Config
}

// keepAll is a configuration that sets none of the tunables, as tallyd's is without
// flags: every existing stream keeps its own.
func keepAll() pipeline.StreamConfig {
	return pipeline.StreamConfig{Subjects: pipeline.NewSubjects(""), Partitions: 4}
}

// What an operator set with nats stream edit that Tally does not need survives a
// restart (Setup again); the flags, when set, win.
func TestSetupKeepsOperatorEdits(t *testing.T) {
	js, _ := jetstream.New(natstest.Connect(t, natstest.Start(t)))
	ctx := context.Background()
	cfg := keepAll()
	sj := cfg.Subjects
	if err := pipeline.Setup(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	if c := streamConfig(t, js, sj.EventsStream()); c.MaxBytes != -1 || c.Compression != jetstream.NoCompression ||
		c.MaxAge != pipeline.DefaultEventsMaxAge || c.Duplicates != pipeline.DefaultDupWindow || c.Replicas != 1 {
		t.Fatalf("new events stream: %+v", c)
	}
	editStream(t, js, sj.EventsStream(), func(c *jetstream.StreamConfig) {
		c.MaxBytes, c.Compression, c.Duplicates, c.MaxMsgSize = 1<<30, jetstream.S2Compression, 10*time.Minute, 1<<20
		c.Metadata = map[string]string{"owner": "ops"}
	})
	editStream(t, js, sj.DeltasStream(), func(c *jetstream.StreamConfig) { c.MaxAge, c.MaxBytes = 48*time.Hour, 1<<31 })
	editStream(t, js, sj.ChangesStream(), func(c *jetstream.StreamConfig) { c.MaxAge = 5 * time.Minute })
	if err := pipeline.Setup(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	ev := streamConfig(t, js, sj.EventsStream())
	if ev.MaxBytes != 1<<30 || ev.Compression != jetstream.S2Compression || ev.Duplicates != 10*time.Minute || ev.MaxMsgSize != 1<<20 || ev.Metadata["owner"] != "ops" {
		t.Errorf("a restart undid the events stream's edit: max bytes %d, compression %v, duplicates %v, max msg size %d, metadata %v",
			ev.MaxBytes, ev.Compression, ev.Duplicates, ev.MaxMsgSize, ev.Metadata)
	}
	if de := streamConfig(t, js, sj.DeltasStream()); de.MaxAge != 48*time.Hour || de.MaxBytes != 1<<31 {
		t.Errorf("a restart undid the deltas stream's edit: max age %v, max bytes %d", de.MaxAge, de.MaxBytes)
	}
	if ch := streamConfig(t, js, sj.ChangesStream()); ch.MaxAge != 5*time.Minute {
		t.Errorf("a restart undid the changes stream's edit: max age %v", ch.MaxAge)
	}
	// --events-max-bytes and --events-compression set them.
	cfg.EventsMaxBytes, cfg.EventsCompression = -1, "none"
	if err := pipeline.Setup(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	if ev := streamConfig(t, js, sj.EventsStream()); ev.MaxBytes != -1 || ev.Compression != jetstream.NoCompression || ev.Duplicates != 10*time.Minute {
		t.Errorf("flags not applied: max bytes %d, compression %v, duplicates %v", ev.MaxBytes, ev.Compression, ev.Duplicates)
	}
	cfg.EventsMaxBytes, cfg.EventsCompression = 1<<29, "s2"
	if err := pipeline.Setup(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	if ev := streamConfig(t, js, sj.EventsStream()); ev.MaxBytes != 1<<29 || ev.Compression != jetstream.S2Compression {
		t.Errorf("flags not applied: max bytes %d, compression %v", ev.MaxBytes, ev.Compression)
	}
	cfg.EventsCompression = "zstd"
	if err := pipeline.Setup(ctx, js, cfg); !errors.Is(err, pipeline.ErrStreamConfig) {
		t.Errorf("compression zstd: %v, want ErrStreamConfig", err)
	}
}

// A setting under which Tally would lose what it has not consumed, or could not publish,
// is refused with the field and the value Tally needs, not silently undone.
func TestSetupRefusesWhatBreaksTally(t *testing.T) {
	sj := keepAll().Subjects
	f := func(t *testing.T, stream string, edit func(*jetstream.StreamConfig), want string) {
		t.Helper()
		js, _ := jetstream.New(natstest.Connect(t, natstest.Start(t)))
		ctx := context.Background()
		if err := pipeline.Setup(ctx, js, keepAll()); err != nil {
			t.Fatal(err)
		}
		editStream(t, js, stream, edit)
		before := streamConfig(t, js, stream)
		err := pipeline.Setup(ctx, js, keepAll())
		if !errors.Is(err, pipeline.ErrStreamConfig) || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s edited: err %v, want ErrStreamConfig naming %q", stream, err, want)
		}
		if after := streamConfig(t, js, stream); after.Retention != before.Retention || after.Discard != before.Discard ||
			!equalStrings(after.Subjects, before.Subjects) || after.DenyPurge != before.DenyPurge {
			t.Fatalf("%s changed by a refused Setup: %+v", stream, after)
		}
	}
	f(t, sj.EventsStream(), func(c *jetstream.StreamConfig) { c.Retention = jetstream.InterestPolicy }, "retention Interest, Tally needs Limits")
	f(t, sj.DeltasStream(), func(c *jetstream.StreamConfig) { c.Discard = jetstream.DiscardNew }, "discard new, Tally needs old")
	f(t, sj.EventsStream(), func(c *jetstream.StreamConfig) { c.Subjects = []string{"tally.ev.like.*"} }, "subjects [tally.ev.like.*], Tally needs [tally.ev.*.*]")
	f(t, sj.DeltasStream(), func(c *jetstream.StreamConfig) { c.DenyPurge = true }, "deny purge true, Tally needs false")
	f(t, sj.EventsStream(), func(c *jetstream.StreamConfig) { c.MaxMsgsPerSubject = 1 }, "max messages per subject 1, Tally needs -1")
	f(t, sj.LogStream(), func(c *jetstream.StreamConfig) { c.MaxBytes = 1 << 30 }, "max bytes or messages")
}

func equalStrings(a, b []string) bool { return strings.Join(a, "\x00") == strings.Join(b, "\x00") }

// A new events stream kept in memory would lose what the stages have not consumed when
// NATS restarts.
func TestSetupRefusesMemoryEvents(t *testing.T) {
	js, _ := jetstream.New(natstest.Connect(t, natstest.Start(t)))
	ctx := context.Background()
	sc := keepAll().Streams()[0]
	sc.Storage = jetstream.MemoryStorage
	if _, err := js.CreateStream(ctx, sc); err != nil {
		t.Fatal(err)
	}
	if err := pipeline.Setup(ctx, js, keepAll()); !errors.Is(err, pipeline.ErrStreamConfig) || !strings.Contains(err.Error(), "storage Memory, Tally needs File") {
		t.Fatalf("events in memory: %v", err)
	}
}
