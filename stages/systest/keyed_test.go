package systest

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/stages/node"
	"github.com/tally-dev/tally/stages/systest/rig"
)

// Events stored by key (every stream before 1.8, and tallyd's --keyed-events), then by
// partition, by key again (a rollback) and by partition again, as one stream is across
// an upgrade, are applied in the stream's order as one: relations made in one form and
// undone in the next, batches not split by partition whose relation events Tally
// forwards (its hop batches stored in both forms too), single events, every type; every
// count, relation and unread then agrees with the reference model of the stored stream.
func TestEventsStoredByKeyThenByPartition(t *testing.T) {
	const parts = 4
	_, c := rig.StartNode(t, func(c *node.Config) { c.Partitions, c.KeyedEvents = parts, true })
	js, err := jetstream.New(c.Conn())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	g := &chaosGen{r: rand.New(rand.NewPCG(8, 9)), users: 12, posts: 6}
	pr := &chaosProducer{t: t, c: c, js: js, acked: map[string]int{}}
	publish := func(round int) { // batches split and not, single events, some sent twice
		for range 40 {
			pr.publish(g, 30)
		}
		t.Logf("round %d: %d transactions so far", round, pr.txs)
	}
	st, err := js.Stream(ctx, c.Subjects().EventsStream())
	if err != nil {
		t.Fatal(err)
	}
	forms := map[bool]int{}
	for round, keyed := range []bool{true, false, true, false} {
		if round > 0 { // what a tallyd of the form asked does to the stream at start
			if err := pipeline.Setup(ctx, js, pipeline.StreamConfig{Subjects: c.Subjects(), Partitions: parts, KeyedEvents: keyed}); err != nil {
				t.Fatal(err)
			}
		}
		from, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		publish(round)
		if round%2 == 1 {
			rig.WaitCaughtUp(t, c) // some rounds' hop batches are stored in the next one's form
		}
		to, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for seq := from.State.LastSeq + 1; seq <= to.State.LastSeq; seq++ {
			m, err := st.GetMsg(ctx, seq)
			if err != nil {
				t.Fatal(err)
			}
			forms[strings.Count(m.Subject, ".") == 4]++
		}
	}
	if forms[true] == 0 || forms[false] == 0 {
		t.Fatalf("stored by key %d messages, by partition %d: want both", forms[true], forms[false])
	}
	rig.WaitCaughtUp(t, c)
	ref := rig.StoredModel(t, c)
	var users, posts []uint64
	for u := 1; u <= g.users; u++ {
		users = append(users, uint64(u))
	}
	for p := range g.posts {
		posts = append(posts, 1<<41+uint64(p))
	}
	rig.CheckReference(t, c, ref, users, posts, 1)
	t.Logf("stored by key %d messages, by partition %d; %v", forms[true], forms[false], ref.Events())
}
