package systest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/natstest"
	"github.com/tally-dev/tally/stages/node"
	"github.com/tally-dev/tally/stages/systest/rig"
)

// An idle partition's log never expires into a crash loop. The log stream made with an
// age limit (as older versions made it, by the events' age) is updated at start to keep
// its records; and a partition whose last record is gone all the same — aged out before
// the update, or purged — appends its next one after what the log holds, counts the
// event and keeps running. (Before, the next append expected the lost record, was taken
// for fencing and stopped the node, and again at every start.)
func TestLogRecordGone(t *testing.T) {
	s := natstest.Start(t)
	nc := natstest.Connect(t, s)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sj := pipeline.NewSubjects("")
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: sj.LogStream(), Subjects: []string{sj.Prefix + ".log.>"}, MaxAge: time.Hour}); err != nil {
		t.Fatal(err)
	}
	cfg := node.DefaultConfig()
	cfg.DataDir, cfg.NATSURL, cfg.Partitions, cfg.FlushInterval = t.TempDir(), s.ClientURL(), 1, 20*time.Millisecond
	cfg.BackupEvery = time.Hour // the stage logs every transaction; no backup purges meanwhile
	n, err := node.Start(ctx, cfg, rig.Logger())
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	st, err := js.Stream(ctx, sj.LogStream())
	if err != nil {
		t.Fatal(err)
	}
	if age := st.CachedInfo().Config.MaxAge; age != 0 {
		t.Fatalf("the log stream ages its records out after %v", age)
	}
	c, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	views := func(want uint64) {
		t.Helper()
		rig.Eventually(t, fmt.Sprint(want, " views counted"), func() (bool, string) {
			select {
			case <-n.Failed():
				t.Fatal("the node stopped")
			default:
			}
			r, err := c.Get(ctx, "post", 7)
			if err != nil || len(r.Counts) != 1 {
				return false, fmt.Sprint(r, err)
			}
			return r.Counts[0][3] == want, fmt.Sprint(r.Counts[0])
		})
	}
	if err := c.Publish(ctx, pipeline.Event{Type: "view", Post: 7, Tx: "v1"}); err != nil {
		t.Fatal(err)
	}
	views(1)
	if err := st.Purge(ctx, jetstream.WithPurgeSubject(sj.Log(0))); err != nil {
		t.Fatal(err)
	}
	if err := c.Publish(ctx, pipeline.Event{Type: "view", Post: 7, Tx: "v2"}); err != nil {
		t.Fatal(err)
	}
	views(2)
	if last, err := st.GetLastMsgForSubject(ctx, sj.Log(0)); err != nil {
		t.Fatalf("no log record after the lost one: %v", err)
	} else if last.Sequence == 0 {
		t.Fatal("no log record after the lost one")
	}
	select {
	case <-n.Failed():
		t.Fatal("the node stopped")
	default:
	}
}
