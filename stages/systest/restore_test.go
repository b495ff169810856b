package systest

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/stages/hop"
	"github.com/tally-dev/tally/stages/hop/hoptest"
	"github.com/tally-dev/tally/stages/node"
	"github.com/tally-dev/tally/stages/systest/rig"
)

// A delta batch whose publish is lost (the fifth) stays in its stage's log record while
// the stage goes on and backs its state up again and again; the process stops, and another takes
// the partition over by restoring its backup (no standby). It sends the batch again
// from that record, and the count is exact. Each backup purges the log below the oldest
// record its state reads (stagelog.State.LogKept): purged below the state's own, the
// record is gone after the second backup, and so is the batch.
func TestLostDeltaAcrossABackupRestore(t *testing.T) {
	url, c := rig.NATSServer(t)
	release := make(chan struct{})
	sj := pipeline.NewSubjects("")
	hold := &hoptest.Hold{Subject: sj.Delta(pipeline.FamilyPost, 0), Nth: 5}
	a := rig.StartJoiner(t, url, func(cfg *node.Config) {
		cfg.Partitions, cfg.Standbys = 1, false
		cfg.BackupEvery, cfg.BackupRest = 20*time.Millisecond, -1 // back to back, while the backlog drains
		cfg.HoldEvents = func(int) { <-release }                  // until the backlog is stored
		cfg.WrapPublisher = func(js hop.Publisher, salt uint64) hop.Publisher {
			if salt != 1<<20 { // event partition 0's outbox (node.startStage)
				return js
			}
			hold.Publisher = js
			return hold
		}
	})
	rig.Eventually(t, "the partition owned", func() (bool, string) { return len(a.Parts()) == 1, fmt.Sprint(a.Parts()) })
	// A backlog of single likes of one post, so that the stage commits transaction after
	// transaction (1 024 messages each) without going idle: an idle stage waits for its
	// outbox, and the held batch would keep it waiting.
	const likes = 30_000
	evs := make([]pipeline.Event, likes)
	for i := range evs {
		evs[i] = pipeline.Event{Type: "like", UID: pipeline.ID(1 + i), Post: 7, Owner: 3, Tx: "lost-" + strconv.Itoa(i)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := 0; i < likes; i += 1000 {
		if err := c.Publish(ctx, evs[i:i+1000]...); err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	rig.Eventually(t, "20 transactions, the fifth's delta batch held", func() (bool, string) {
		return hold.Held() != nil && a.EventStats.Txns.Load() >= 20, fmt.Sprint(a.EventStats.Txns.Load(), " transactions")
	})
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	// The backups purged the records before the held batch's: the test tests a purge.
	js, err := jetstream.New(c.Conn())
	if err != nil {
		t.Fatal(err)
	}
	logs, err := js.Stream(ctx, sj.LogStream())
	if err != nil {
		t.Fatal(err)
	}
	first, err := logs.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(sj.Log(0)))
	if err != nil || first.Sequence < 3 {
		t.Fatalf("the log's first record of partition 0: %v %v; want the first records purged by the backups", first, err)
	}
	b := rig.StartJoiner(t, url, func(cfg *node.Config) { cfg.Partitions, cfg.Standbys, cfg.BackupEvery = 1, false, time.Second })
	rig.Eventually(t, "every like counted by the new owner", func() (bool, string) {
		got, err := c.GetWith(ctx, "post", []uint64{7})
		if err != nil || len(got.Counts) == 0 {
			return false, fmt.Sprint(err)
		}
		return got.Counts[0][0] == likes, fmt.Sprintf("%d likes, want %d (taken over: %q)", got.Counts[0][0], likes, b.Takeover())
	})
	if b.Takeover() != "backup" {
		t.Fatalf("taken over from %q, want a backup restored", b.Takeover())
	}
}
