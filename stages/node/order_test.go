package node_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/stages/node"
)

// orderModel is unread by the events stream's order: each event takes effect at its
// place in the stream (stream sequence, then index in a batch), whichever partition
// applies it and whenever.
type orderModel struct {
	streamUnread
	pos   int
	likes map[[2]uint64]bool
	notif map[uint64]*[4]uint64 // comment, mention, like, dm
}

func newOrderModel() *orderModel {
	return &orderModel{likes: map[[2]uint64]bool{}, notif: map[uint64]*[4]uint64{}, streamUnread: newStreamUnread()}
}

func (m *orderModel) apply(e pipeline.Event) {
	m.pos++
	uid, target := uint64(e.UID), uint64(e.Target)
	bump := func(who uint64, k int) {
		if m.notif[who] == nil {
			m.notif[who] = new([4]uint64)
		}
		m.notif[who][k]++
	}
	switch e.Type {
	case "like":
		if !m.likes[[2]uint64{uid, uint64(e.Post)}] {
			m.likes[[2]uint64{uid, uint64(e.Post)}] = true
			if e.Owner != 0 && e.Owner != e.UID {
				bump(uint64(e.Owner), 2)
			}
		}
	case "comment":
		if e.Owner != 0 && e.Owner != e.UID {
			bump(uint64(e.Owner), 0)
		}
	case "mention", "dm":
		if uid != target {
			bump(target, map[string]int{"mention": 1, "dm": 3}[e.Type])
		}
	case "system":
		m.system++
	case "follow":
		if _, ok := m.followed[[2]uint64{uid, target}]; !ok {
			m.followed[[2]uint64{uid, target}] = m.pos
		}
	case "unfollow":
		delete(m.followed, [2]uint64{uid, target})
	case "post":
		m.posted[uid] = append(m.posted[uid], m.pos)
	case "read":
		kinds := e.Kinds
		if len(kinds) == 0 {
			kinds = pipeline.UnreadKinds()
		}
		for _, k := range kinds {
			switch k {
			case "feed":
				m.feedRead[uid] = m.pos
			case "system":
				m.sysSeen[uid] = m.system
			default:
				if m.notif[uid] != nil {
					m.notif[uid][map[string]int{"comment": 0, "mention": 1, "like": 2, "dm": 3}[k]] = 0
				}
			}
		}
	}
}

func (m *orderModel) want(u uint64) pipeline.Unread { return m.counts(u, m.notif[u]) }

// replayStored applies to m, in the stream's order, every event stored by a producer
// message whose id starts with prefix (what Tally hands between partitions is skipped).
func replayStored(t *testing.T, js jetstream.JetStream, sj pipeline.Subjects, prefix string, m *orderModel) {
	t.Helper()
	ctx := context.Background()
	st, err := js.Stream(ctx, sj.EventsStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.OrderedConsumer(ctx, sj.EventsStream(), jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(0); seq < info.State.LastSeq; {
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for msg := range batch.Messages() {
			n++
			md, _ := msg.Metadata()
			seq = md.Sequence.Stream
			if !strings.HasPrefix(msg.Headers().Get(jetstream.MsgIDHeader), prefix) {
				continue
			}
			parts := strings.Split(msg.Subject(), ".")
			evs, _, err := pipeline.DecodeEvents(parts[len(parts)-2], msg.Data(), msg.Headers(), pipeline.DefaultFamilies())
			if err != nil {
				t.Fatalf("stored event at %d: %v", seq, err)
			}
			for _, e := range evs {
				m.apply(e)
			}
		}
		if n == 0 {
			t.Fatalf("events stream read up to %d of %d", seq, info.State.LastSeq)
		}
	}
}

// TestUnreadByStreamOrder holds one partition back (a backlog published into it first)
// so that events stored before others are applied after them, across partitions: a
// like, a comment, a mention and a system notice stored before the read that covers
// them; a read stored before a like, handed over late from another partition's batch;
// follows, posts, reads and unfollows all in the same millisecond, pushed and pulled.
// Every user's unread must equal the stream's order, replayed from the stored events.
func TestUnreadByStreamOrder(t *testing.T) {
	const parts = 4
	_, c := startNode(t, func(c *node.Config) { c.Partitions = parts; c.FanoutLimit = 3 })
	ctx := context.Background()
	js, _ := jetstream.New(c.Conn())
	in := func(p int, from uint64) uint64 {
		for id := from; ; id++ {
			if pipeline.PartitionOf(pipeline.ID(id), parts) == p {
				return id
			}
		}
	}
	const slow = 1 // the partition held back
	owner, reader, author := in(0, 10), in(0, 20), in(slow, 30)
	racer, celeb := in(2, 40), in(slow, 50) // celeb: more followers than the limit
	liker, liker2, actor := in(slow, 60), in(0, 70), in(slow, 80)
	fans := []uint64{in(2, 100), in(3, 100), in(2, 200), in(3, 200)}
	users := append([]uint64{owner, reader, author, racer, celeb, liker, liker2, actor}, fans...)
	const ts = 7 // every event in the same millisecond
	tx := 0
	single := func(e pipeline.Event) {
		t.Helper()
		tx++
		e.TS, e.Tx = ts, fmt.Sprint("ord.", tx)
		if err := c.Publish(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	raw := func(key uint64, evs ...pipeline.Event) { // one unsplit batch, applied where key lands
		t.Helper()
		tx++
		for i := range evs {
			evs[i].TS = ts
		}
		data, _ := pipeline.Marshal(&pipeline.Batch{Events: evs}, false)
		if _, err := js.Publish(ctx, c.Subjects().Event(pipeline.TypeBatch, pipeline.ID(key)), data, jetstream.WithMsgID(fmt.Sprint("ord.", tx))); err != nil {
			t.Fatal(err)
		}
	}
	backlog := func() { // views of posts of the slow partition, published without waiting
		t.Helper()
		post := in(slow, 1<<40)
		for range 8 {
			views := make([]pipeline.Event, 5000)
			for i := range views {
				views[i] = pipeline.Event{Type: "view", Post: pipeline.ID(post), N: 1}
			}
			raw(post, views...)
		}
	}
	// Followers first, settled: the celebrity's are above the limit, the author's not.
	for i, f := range fans {
		single(pipeline.Event{Type: "follow", UID: pipeline.ID(f), Target: pipeline.ID(celeb)})
		if i < 2 {
			single(pipeline.Event{Type: "follow", UID: pipeline.ID(f), Target: pipeline.ID(author)})
		}
	}
	waitCaughtUp(t, c)

	for round := range 3 {
		backlog()
		post := pipeline.ID(1<<41 + round*100)
		// Stored in the slow partition before the reads below, applied after them.
		single(pipeline.Event{Type: "like", UID: pipeline.ID(liker), Post: post, Owner: pipeline.ID(owner)})
		single(pipeline.Event{Type: "comment", UID: pipeline.ID(liker), Post: post, Comment: pipeline.ID(round + 1), Owner: pipeline.ID(owner)})
		raw(liker, pipeline.Event{Type: "mention", UID: pipeline.ID(actor), Target: pipeline.ID(owner)},
			pipeline.Event{Type: "system", ID: 1})
		single(pipeline.Event{Type: "post", UID: pipeline.ID(author), Post: post + 1})
		single(pipeline.Event{Type: "post", UID: pipeline.ID(celeb), Post: post + 2})
		// A read of the racer stored before a like of theirs, in the slow partition's
		// batch: it reaches the racer's partition after the like.
		raw(liker, pipeline.Event{Type: "read", UID: pipeline.ID(racer), Kinds: []string{"like", "feed"}},
			pipeline.Event{Type: "follow", UID: pipeline.ID(racer), Target: pipeline.ID(author)})
		single(pipeline.Event{Type: "like", UID: pipeline.ID(liker2), Post: post + 3, Owner: pipeline.ID(racer)})
		// The reads, applied at once in their own partitions.
		single(pipeline.Event{Type: "read", UID: pipeline.ID(owner)})
		single(pipeline.Event{Type: "follow", UID: pipeline.ID(reader), Target: pipeline.ID(author)})
		single(pipeline.Event{Type: "follow", UID: pipeline.ID(reader), Target: pipeline.ID(celeb)})
		single(pipeline.Event{Type: "post", UID: pipeline.ID(author), Post: post + 4})
		single(pipeline.Event{Type: "post", UID: pipeline.ID(celeb), Post: post + 5})
		if round == 1 {
			single(pipeline.Event{Type: "read", UID: pipeline.ID(reader), Kinds: []string{"feed"}})
			single(pipeline.Event{Type: "post", UID: pipeline.ID(author), Post: post + 6})
		}
		if round == 2 {
			single(pipeline.Event{Type: "unfollow", UID: pipeline.ID(reader), Target: pipeline.ID(author)})
			single(pipeline.Event{Type: "unfollow", UID: pipeline.ID(fans[0]), Target: pipeline.ID(author)})
		}
		waitCaughtUp(t, c)
		m := newOrderModel()
		replayStored(t, js, c.Subjects(), "ord.", m)
		got, err := c.UnreadMany(ctx, users...)
		if err != nil {
			t.Fatal(err)
		}
		for i, u := range users {
			if w := m.want(u); got[i] != w {
				t.Errorf("round %d: unread of %d = %+v, stream order %+v", round, u, got[i], w)
			}
		}
		if t.Failed() {
			return
		}
	}
}
