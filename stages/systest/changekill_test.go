package systest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/stages/hop"
	"github.com/tally-dev/tally/stages/node"
	"github.com/tally-dev/tally/stages/systest/rig"
)

// A test binary started with TALLY_CHGKILL_CHILD runs as the owner of
// TestChangeMirrorAfterKillBetweenParts, which SIGKILLs itself between the parts of
// the first checkpoint whose change events take more than one message.
func init() {
	if dir := os.Getenv("TALLY_CHGKILL_CHILD"); dir != "" {
		os.Exit(runChangeKillChild(dir))
	}
}

const changeKillPartitions = 2

func changeKillConfig(cfg *node.Config) {
	cfg.Partitions, cfg.Join, cfg.BackupEvery, cfg.LeaseTTL = changeKillPartitions, true, 300*time.Millisecond, time.Second
}

func runChangeKillChild(dir string) int {
	cfg := node.DefaultConfig()
	cfg.DataDir, cfg.NATSURL = dir, os.Getenv("TALLY_CHGKILL_NATS")
	changeKillConfig(&cfg)
	// A long flush: the views of one batch make one checkpoint, of several parts.
	cfg.FlushInterval = 300 * time.Millisecond
	cfg.ChangePublisher = func(_ string, _ int, pub hop.Publisher) hop.Publisher {
		return &killBetweenParts{pub: pub, part0: map[string]bool{}}
	}
	if err := node.Run(context.Background(), cfg, slog.New(slog.NewTextHandler(os.Stderr, nil))); err != nil {
		fmt.Fprintln(os.Stderr, "change-kill child:", err)
		return 1
	}
	return 0
}

// killBetweenParts publishes change events until asked for part 1 of a checkpoint
// whose part 0 it published: a counter partition sends a part only once the one before
// is stored, so it SIGKILLs the process between the two.
type killBetweenParts struct {
	pub   hop.Publisher
	part0 map[string]bool // by id without its part
}

func (k *killBetweenParts) PublishMsgAsync(msg *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	id := msg.Header.Get(jetstream.MsgIDHeader)
	cut := strings.LastIndexByte(id, '.')
	if _, ok := pipeline.ChangePos(id); !ok || cut < 0 {
		return k.pub.PublishMsgAsync(msg, opts...)
	}
	checkpoint, part := id[:cut], id[cut+1:]
	if part == "0" {
		k.part0[checkpoint] = true
	} else if k.part0[checkpoint] {
		fmt.Fprintln(os.Stderr, "killed between the parts of", checkpoint)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal ends the process
	}
	return k.pub.PublishMsgAsync(msg, opts...)
}

// Item 4 with a real process: an owner SIGKILLed after part 0 of a checkpoint of more
// than 4 096 ids is stored and before part 1 is. Its standby, in another process,
// trims its own change events meanwhile (likes keep coming to the partition from the
// other one), takes the partition over and announces what the owner did not: a mirror
// of tally.chg.> ends equal to what get answers for every id. (Before, the standby took
// the stored part 0 for the whole checkpoint and dropped its own events for it.)
func TestChangeMirrorAfterKillBetweenParts(t *testing.T) {
	url, c := rig.NATSServer(t)
	owner := &child{t: t, dir: t.TempDir(), stderr: new(rig.LogBuffer)}
	owner.cmd = exec.Command(os.Args[0], "-test.run=^$")
	owner.cmd.Env = append(os.Environ(), "TALLY_CHGKILL_CHILD="+owner.dir, "TALLY_CHGKILL_NATS="+url)
	owner.cmd.Stderr = owner.stderr
	if err := owner.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = owner.cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = owner.cmd.Process.Signal(syscall.SIGKILL)
		<-exited
		if t.Failed() {
			t.Logf("owner's stderr:\n%s", rig.Tail(owner.stderr.String(), 40))
		}
	})
	ctx := context.Background()
	rig.Eventually(t, "the owner up", func() (bool, string) {
		h, err := c.Health(ctx)
		return err == nil && h.OK, fmt.Sprint(h, err)
	})
	b := rig.StartJoiner(t, url, changeKillConfig)
	rig.Eventually(t, "the second owns a partition and keeps the other warm", func() (bool, string) {
		return len(b.Parts()) == 1 && len(b.Standbys()) == 1, fmt.Sprintf("owns %v, keeps %v", b.Parts(), b.Standbys())
	})
	killed, other := b.Standbys()[0], b.Parts()[0]
	in := func(p int, from uint64, n int) []uint64 {
		var ids []uint64
		for id := from; len(ids) < n; id++ {
			if pipeline.PartitionOf(pipeline.ID(id), changeKillPartitions) == p {
				ids = append(ids, id)
			}
		}
		return ids
	}

	// 6 000 posts of the owner's partition viewed in one batch: one checkpoint of 6 000
	// ids, two change messages.
	posts := in(killed, 1_000_000, 6000)
	var views []pipeline.Event
	for _, p := range posts {
		views = append(views, pipeline.Event{Type: "view", Post: pipeline.ID(p), N: 1})
	}
	publishRetrying(t, c, "views", views)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatal("the owner was not killed between the parts of a checkpoint")
	}
	if !strings.Contains(owner.stderr.String(), "killed between the parts of") {
		t.Fatal("the owner died, but not between the parts of a checkpoint")
	}
	// Likes of those posts by users of the other partition reach the killed partition's
	// counters as deltas while its lease runs out: the standby checkpoints, and trims.
	users := in(other, 1, 50)
	for i := 0; !slices.Contains(b.Parts(), killed); i++ {
		if i > 600 {
			t.Fatal("the second never took the killed owner's partition over")
		}
		ev := pipeline.Event{Type: "like", UID: pipeline.ID(users[i%len(users)]), Post: pipeline.ID(posts[i%len(posts)])}
		publishRetrying(t, c, fmt.Sprint("like.", i), []pipeline.Event{ev})
		time.Sleep(50 * time.Millisecond) // the pace of the likes, not a wait for something
	}
	rig.WaitCaughtUp(t, c)

	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	rig.Eventually(t, "the mirror of tally.chg.post.* to equal get", func() (bool, string) {
		mirrors, _, err := changeMirror(ctx, js, pipeline.NewSubjects(""))
		if err != nil {
			return false, err.Error()
		}
		mirror := mirrors[pipeline.FamilyPost]
		missing, stale := 0, 0
		for ids := posts; len(ids) > 0; ids = ids[min(len(ids), 1000):] {
			k := min(len(ids), 1000)
			r, err := c.Get(ctx, pipeline.FamilyPost, ids[:k]...)
			if err != nil || len(r.Unavailable) > 0 {
				return false, fmt.Sprint(err, r)
			}
			for i, id := range ids[:k] {
				switch m, ok := mirror[id]; {
				case !ok:
					missing++
				case !slices.Equal(m, r.Counts[i]):
					stale++
				}
			}
		}
		return missing+stale == 0, fmt.Sprintf("%d of %d posts missing from the mirror, %d stale", missing, len(posts), stale)
	})
}
