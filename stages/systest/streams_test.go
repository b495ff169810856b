package systest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/natstest"
	"github.com/tally-dev/tally/stages/node"
	"github.com/tally-dev/tally/stages/systest/rig"
)

// What an operator set with nats stream edit survives a restart of tallyd (which set
// every stream to its own configuration at each start); a flag given wins.
func TestRestartKeepsStreamEdits(t *testing.T) {
	s := natstest.Start(t)
	js, _ := jetstream.New(natstest.Connect(t, s))
	ctx := context.Background()
	cfg := node.DefaultConfig()
	cfg.NATSURL, cfg.Partitions, cfg.FlushInterval = s.ClientURL(), 4, 20*time.Millisecond
	run := func(cfg node.Config) {
		t.Helper()
		cfg.DataDir = t.TempDir()
		n, err := node.Start(ctx, cfg, rig.Logger())
		if err != nil {
			t.Fatal(err)
		}
		if err := n.Close(); err != nil {
			t.Fatal(err)
		}
	}
	sj := pipeline.NewSubjects(cfg.Prefix)
	info := func(name string) jetstream.StreamConfig {
		t.Helper()
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return st.CachedInfo().Config
	}
	edit := func(name string, f func(*jetstream.StreamConfig)) {
		t.Helper()
		c := info(name)
		f(&c)
		if _, err := js.UpdateStream(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	run(cfg)
	edit(sj.EventsStream(), func(c *jetstream.StreamConfig) {
		c.MaxBytes, c.Compression, c.Duplicates = 1<<30, jetstream.S2Compression, 10*time.Minute
	})
	edit(sj.DeltasStream(), func(c *jetstream.StreamConfig) { c.MaxAge = 48 * time.Hour })
	run(cfg)
	if ev := info(sj.EventsStream()); ev.MaxBytes != 1<<30 || ev.Compression != jetstream.S2Compression || ev.Duplicates != 10*time.Minute {
		t.Errorf("a restart undid nats stream edit: max bytes %d, compression %v, duplicate window %v", ev.MaxBytes, ev.Compression, ev.Duplicates)
	}
	if de := info(sj.DeltasStream()); de.MaxAge != 48*time.Hour {
		t.Errorf("a restart undid the deltas' max age: %v", de.MaxAge)
	}
	cfg.EventsMaxBytes, cfg.EventsCompression, cfg.DupWindow = -1, "none", time.Minute
	run(cfg)
	if ev := info(sj.EventsStream()); ev.MaxBytes != -1 || ev.Compression != jetstream.NoCompression || ev.Duplicates != time.Minute {
		t.Errorf("the flags were not applied: max bytes %d, compression %v, duplicate window %v", ev.MaxBytes, ev.Compression, ev.Duplicates)
	}
}

// A family read from --families is counted through incr events and answered by
// tally.get.<family>, beside the built-in ones.
func TestFamilyFromFile(t *testing.T) {
	fams, err := pipeline.ReadFamilies([]byte(`[{"name":"video","fields":["play","share"]}]`))
	if err != nil {
		t.Fatal(err)
	}
	_, c := rig.StartNode(t, func(cfg *node.Config) { cfg.Families = fams })
	ctx := context.Background()
	evs := []pipeline.Event{{Type: "incr", Family: "video", ID: 7, Field: "share", N: 2}, {Type: "incr", Family: "video", ID: 7, Field: "play", N: 5},
		{Type: "incr", Family: "post", ID: 7, Field: "view", N: 1}}
	for i, ev := range evs {
		ev.Tx = "fam" + string(rune('a'+i))
		if err := c.Publish(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	natstest.Eventually(t, 30*time.Second, "the video counts", func() (bool, string) {
		r, err := c.Get(ctx, "video", 7)
		if err != nil {
			return false, err.Error()
		}
		return len(r.Counts) == 1 && len(r.Fields) == 2 && r.Counts[0][0] == 5 && r.Counts[0][1] == 2, fmt.Sprint(r.Fields, r.Counts)
	})
}
