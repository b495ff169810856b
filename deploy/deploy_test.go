package deploy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/natstest"
	"github.com/tally-dev/tally/stages/node"
)

// users are the accounts.conf users and the environment variables holding their passwords.
var users = map[string]string{
	"tallyd":   "NATS_TALLYD_PASSWORD",
	"producer": "NATS_PRODUCER_PASSWORD",
	"reader":   "NATS_READER_PASSWORD",
	"gateway":  "NATS_GATEWAY_PASSWORD",
	"admin":    "NATS_ADMIN_PASSWORD",
	"sys":      "NATS_SYS_PASSWORD",
}

// setPasswords sets every NATS_*_PASSWORD the way deploy/README.md tells an operator to
// make them, and returns them by user.
func setPasswords(t *testing.T) map[string]string {
	pw := map[string]string{}
	for user, env := range users {
		b := make([]byte, 24)
		_, _ = rand.Read(b)
		pw[user] = "p" + hex.EncodeToString(b)
		t.Setenv(env, pw[user])
	}
	// Routes authenticate as user route; each node's route URLs carry its password, as
	// compose.yaml builds them.
	t.Setenv("NATS_ROUTE_PASSWORD", pw["admin"]+"r")
	for i := 1; i <= 3; i++ {
		t.Setenv(fmt.Sprintf("NATS_ROUTE_%d", i), fmt.Sprintf("nats-route://route:%sr@nats-%d:6222", pw["admin"], i))
	}
	return pw
}

// inboxPrefix is the inbox prefix accounts.conf gives user (admin has all of _INBOX.>).
func inboxPrefix(user string) string {
	if user == "admin" || user == "sys" {
		return ""
	}
	return "_INBOX_" + user
}

// violations records the permission violations a server logs.
type violations struct {
	mu    sync.Mutex
	lines []string
}

func (v *violations) Errorf(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	if strings.Contains(line, "Violation") {
		v.mu.Lock()
		v.lines = append(v.lines, line)
		v.mu.Unlock()
	}
}
func (v *violations) Noticef(string, ...any) {}
func (v *violations) Warnf(string, ...any)   {}
func (v *violations) Fatalf(string, ...any)  {}
func (v *violations) Debugf(string, ...any)  {}
func (v *violations) Tracef(string, ...any)  {}

// none fails t at once when anything was refused: a missing grant shows as the subject
// refused rather than as a timeout.
func (v *violations) none(t *testing.T) {
	t.Helper()
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.lines) > 0 {
		t.Fatalf("permission violations while Tally ran (accounts.conf grants too little):\n%s", strings.Join(v.lines, "\n"))
	}
}

func (v *violations) take() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := v.lines
	v.lines = nil
	return out
}

// startServer starts a nats-server from a config that includes deploy/nats/accounts.conf
// unchanged, with JetStream on a free loopback port.
func startServer(t *testing.T) (*server.Server, *violations) {
	t.Helper()
	dir := t.TempDir()
	accounts, err := os.ReadFile(filepath.Join("nats", "accounts.conf"))
	if err != nil {
		t.Fatal(err)
	}
	// An include is relative to the including file, so both go in one directory.
	if err := os.WriteFile(filepath.Join(dir, "accounts.conf"), accounts, 0o600); err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf(`server_name: deploy-test
host: 127.0.0.1
port: -1
max_payload: 8MB
jetstream { store_dir: %q }
include "accounts.conf"
`, filepath.Join(dir, "js"))
	path := filepath.Join(dir, "test.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("accounts.conf does not load: %v", err)
	}
	opts.NoSigs = true
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	v := &violations{}
	s.SetLoggerV2(v, false, false, false)
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s, v
}

func userURL(s *server.Server, user, pw string) string {
	return fmt.Sprintf("nats://%s:%s@%s", user, pw, strings.TrimPrefix(s.ClientURL(), "nats://"))
}

// conn is a connection as one user with the asynchronous errors it was sent.
type conn struct {
	*nats.Conn
	errs chan error
}

func connect(t *testing.T, s *server.Server, user, pw string) *conn {
	t.Helper()
	c := &conn{errs: make(chan error, 100)}
	opts := []nats.Option{nats.Name(user)}
	if p := inboxPrefix(user); p != "" { // its replies where only it may subscribe
		opts = append(opts, nats.CustomInboxPrefix(p))
	}
	nc, err := nats.Connect(userURL(s, user, pw), append(opts,
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case c.errs <- err:
			default:
			}
		}))...)
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	c.Conn = nc
	return c
}

// denied runs do, which must make the server refuse what; the refusal is a
// "Permissions Violation for <what>" sent back asynchronously.
func (c *conn) denied(t *testing.T, what string, do func() error) {
	t.Helper()
	for len(c.errs) > 0 { // earlier, already checked refusals
		<-c.errs
	}
	if err := do(); err != nil && !errors.Is(err, nats.ErrPermissionViolation) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout) {
		t.Errorf("%s: %s: unexpected error %v", c.Opts.Name, what, err)
	}
	_ = c.Flush()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case err := <-c.errs:
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), "for "+what) {
				return
			}
		case <-timeout:
			t.Errorf("%s may %s: accounts.conf grants more than it should", c.Opts.Name, what)
			return
		}
	}
}

func (c *conn) publish(subj string) func() error {
	return func() error { return c.Publish(subj, []byte("{}")) }
}

func (c *conn) subscribe(subj string) func() error {
	return func() error { _, err := c.SubscribeSync(subj); return err }
}

// jsAPI sends a JetStream API request, which must be refused.
func (c *conn) request(subj string) func() error {
	return func() error {
		_, err := c.Request(subj, []byte("{}"), 300*time.Millisecond)
		return err
	}
}

// TestPermissions runs a real Tally node as the tallyd user of accounts.conf, feeds it as
// producer, reads it as reader — with no permission violation anywhere — and then checks
// that each user is refused what it must not do.
func TestPermissions(t *testing.T) {
	pw := setPasswords(t)
	s, logged := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// tallyd: stream setup, ordered consumers, deltas, changes, dead letters, queries.
	cfg := node.DefaultConfig()
	cfg.NATSURL = userURL(s, "tallyd", pw["tallyd"])
	cfg.NATSAuth.InboxPrefix = inboxPrefix("tallyd")
	cfg.DataDir = t.TempDir()
	cfg.Partitions = 4
	cfg.FlushInterval = 10 * time.Millisecond
	cfg.PurgeEvery = time.Millisecond // exercise the purge grant at every checkpoint
	cfg.BackupEvery = 50 * time.Millisecond
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	n, err := node.Start(ctx, cfg, log)
	if err != nil {
		t.Fatalf("tally node as user tallyd: %v (violations: %q)", err, logged.take())
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Error(err)
		}
	})

	producer := connect(t, s, "producer", pw["producer"])
	reader := connect(t, s, "reader", pw["reader"])
	prod, err := client.New(producer.Conn)
	if err != nil {
		t.Fatal(err)
	}
	read, err := client.New(reader.Conn)
	if err != nil {
		t.Fatal(err)
	}

	// Reader: raw change events (core subscribe) and client.Watch (ordered consumer).
	raw, err := reader.SubscribeSync("tally.chg.>")
	if err != nil {
		t.Fatal(err)
	}
	watch, err := read.Watch(ctx, "post")
	if err != nil {
		t.Fatalf("reader watch: %v", err)
	}

	// Producer: single events (one resent with the same tx), a batch, and a malformed
	// event (tallyd dead-letters it on tally.dlq.>). Admin: a system notice (tallyd
	// copies it to every partition), which producers may not send.
	events := []pipeline.Event{
		{Type: "like", UID: 7, Post: 42, Owner: 3, Tx: "t1"},
		{Type: "like", UID: 8, Post: 42, Owner: 3, Tx: "t2"},
		{Type: "like", UID: 8, Post: 42, Owner: 3, Tx: "t2"}, // resent: dropped
		{Type: "view", Post: 42, N: 10, Tx: "t3"},
	}
	if err := prod.Publish(ctx, events...); err != nil {
		t.Fatalf("producer publish: %v", err)
	}
	admin := connect(t, s, "admin", pw["admin"])
	adm, err := client.New(admin.Conn)
	if err != nil {
		t.Fatal(err)
	}
	if err := adm.Publish(ctx, pipeline.Event{Type: "system", ID: 1, Tx: "t4"}); err != nil {
		t.Fatalf("admin publish of a system notice: %v", err)
	}
	batch := []pipeline.Event{
		{Type: "like", UID: 9, Post: 42, Owner: 3},
		{Type: "like", UID: 9, Post: 43, Owner: 3},
		{Type: "follow", UID: 9, Target: 3},
		{Type: "repost", UID: 10, Post: 43},
	}
	if err := prod.PublishBatch(ctx, "b1", batch); err != nil {
		t.Fatalf("producer batch: %v", err)
	}
	pjs, err := jetstream.New(producer.Conn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pjs.Publish(ctx, "tally.ev.like.5", []byte(`{"uid":"not a number"}`), jetstream.WithMsgID("bad-1")); err != nil {
		t.Fatalf("producer publish of a malformed event: %v", err)
	}

	// Reader: counts, relations, unread, health.
	natstest.Eventually(t, 30*time.Second, "counts as the reader sees them", func() (bool, string) {
		logged.none(t)
		r, err := read.Get(ctx, "post", 42, 43)
		if err != nil {
			return false, err.Error()
		}
		got := fmt.Sprint(r.Counts)
		return got == "[[3 0 0 10] [1 1 0 0]]", got // like, repost, comment, view
	})
	// Asked again, a get goes to the tallyd serving the posts' partitions, as the first
	// one's answer named it (tally.get.post.at.<token>, protocol 1.9): within the
	// reader's permissions, as the subscription answering it is within tallyd's.
	for range 2 {
		if r, err := read.Get(ctx, "post", 42, 43); err != nil || fmt.Sprint(r.Counts) != "[[3 0 0 10] [1 1 0 0]]" {
			t.Fatalf("a get asked again: %+v, %v", r, err)
		}
	}
	logged.none(t)
	natstest.Eventually(t, 30*time.Second, "unread and health", func() (bool, string) {
		logged.none(t)
		u, err := read.Unread(ctx, 3)
		if err != nil {
			return false, err.Error()
		}
		h, err := read.Health(ctx)
		if err != nil {
			return false, err.Error()
		}
		return u.Like == 4 && u.System == 1 && h.OK, fmt.Sprintf("unread %+v, health %+v", u, h)
	})

	// tallyd's state backups, and a takeover from them by another data directory.
	natstest.Eventually(t, 30*time.Second, "a state backup", func() (bool, string) {
		logged.none(t)
		return n.Backups.Load() > 1, fmt.Sprint(n.Backups.Load(), " backups, ", n.BackupErrs.Load(), " failed")
	})
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	cfg.DataDir = t.TempDir()
	if n, err = node.Start(ctx, cfg, log); err != nil || n.Takeover() != "backup" {
		t.Fatalf("takeover as user tallyd: %v, from %q (violations: %q)", err, n.Takeover(), logged.take())
	}
	natstest.Eventually(t, 30*time.Second, "counts after the takeover", func() (bool, string) {
		logged.none(t)
		r, err := read.Get(ctx, "post", 42, 43)
		if err != nil {
			return false, err.Error()
		}
		got := fmt.Sprint(r.Counts)
		return got == "[[3 0 0 10] [1 1 0 0]]", got
	})
	liked, err := read.Liked(ctx, 9, 42, 43, 44)
	if err != nil || fmt.Sprint(liked) != "[true true false]" {
		t.Errorf("reader liked: %v %v", liked, err)
	}
	page, err := read.List(ctx, client.Followers, 3, 10, "")
	if err != nil || len(page.IDs) != 1 {
		t.Errorf("reader followers: %+v %v", page, err)
	}
	if _, err := raw.NextMsg(10 * time.Second); err != nil {
		t.Errorf("reader raw change events: %v", err)
	}
	select {
	case <-watch:
	case <-time.After(10 * time.Second):
		t.Error("reader watch: no change event")
	}

	// Admin: everything in the account, e.g. reading the dead-letter stream.
	ajs, err := jetstream.New(admin.Conn)
	if err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, "the malformed event dead-lettered", func() (bool, string) {
		st, err := ajs.Stream(ctx, "TALLY_DLQ")
		if err != nil {
			return false, err.Error()
		}
		return st.CachedInfo().State.Msgs == 1, fmt.Sprint(st.CachedInfo().State.Msgs, " dead letters")
	})

	logged.none(t)

	t.Run("producer", func(t *testing.T) {
		producer.denied(t, `Publish to "tally.delta.x"`, producer.publish("tally.delta.x"))
		producer.denied(t, `Publish to "tally.chg.post.0"`, producer.publish("tally.chg.post.0"))
		producer.denied(t, `Publish to "tally.log.0"`, producer.publish("tally.log.0"))
		producer.denied(t, `Publish to "tally.ep.0.like.1"`, producer.publish("tally.ep.0.like.1"))
		producer.denied(t, `Subscription to "tally.chg.>"`, producer.subscribe("tally.chg.>"))
		producer.denied(t, `Publish to "tally.get.post"`, producer.request("tally.get.post"))
		producer.denied(t, `Publish to "tally.part.post.0"`, producer.request("tally.part.post.0"))
		producer.denied(t, `Subscription to "tally.part.post.0"`, producer.subscribe("tally.part.post.0"))
		producer.denied(t, `Publish to "$JS.API.STREAM.DELETE.TALLY_EVENTS"`, producer.request("$JS.API.STREAM.DELETE.TALLY_EVENTS"))
		producer.denied(t, `Publish to "$JS.API.STREAM.PURGE.TALLY_EVENTS"`, producer.request("$JS.API.STREAM.PURGE.TALLY_EVENTS"))
		producer.denied(t, `Publish to "$JS.API.STREAM.INFO.TALLY_DELTAS"`, producer.request("$JS.API.STREAM.INFO.TALLY_DELTAS"))
		// A notice to every user, an add to any counter, what partitions hand each other
		// (hop, notify, push): not a producer's events.
		producer.denied(t, `Publish to "tally.ev.system.1"`, producer.publish("tally.ev.system.1"))
		producer.denied(t, `Publish to "tally.ev.incr.1"`, producer.publish("tally.ev.incr.1"))
		producer.denied(t, `Publish to "tally.ev.adminbatch.1"`, producer.publish("tally.ev.adminbatch.1"))
		producer.denied(t, `Publish to "tally.ev.hop.1"`, producer.publish("tally.ev.hop.1"))
		producer.denied(t, `Publish to "tally.ev.notify.1"`, producer.publish("tally.ev.notify.1"))
		producer.denied(t, `Publish to "tally.ev.push.1"`, producer.publish("tally.ev.push.1"))
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second) // refused: no ack comes
		defer cancel()
		if err := prod.Publish(pctx, pipeline.Event{Type: "incr", Family: "post", ID: 42, Field: "like", N: 1000, Tx: "x1"}); err == nil {
			t.Error("a producer published an incr event")
		}
		// Nobody's replies but its own.
		for _, subj := range []string{"_INBOX.>", "_INBOX_reader.>", "_INBOX_tallyd.>", ">"} {
			producer.denied(t, `Subscription to "`+subj+`"`, producer.subscribe(subj))
		}
	})
	t.Run("reader", func(t *testing.T) {
		reader.denied(t, `Publish to "tally.ev.like.1"`, reader.publish("tally.ev.like.1"))
		reader.denied(t, `Publish to "tally.delta.post.0"`, reader.publish("tally.delta.post.0"))
		reader.denied(t, `Publish to "tally.chg.post.0"`, reader.publish("tally.chg.post.0"))
		reader.denied(t, `Publish to "tally.log.0"`, reader.publish("tally.log.0"))
		reader.denied(t, `Subscription to "tally.ep.>"`, reader.subscribe("tally.ep.>"))
		reader.denied(t, `Subscription to "tally.get.post"`, reader.subscribe("tally.get.post"))
		reader.denied(t, `Publish to "tally.part.post.0"`, reader.request("tally.part.post.0"))
		reader.denied(t, `Subscription to "tally.part.post.0"`, reader.subscribe("tally.part.post.0"))
		reader.denied(t, `Publish to "$JS.API.STREAM.PURGE.TALLY_CHANGES"`, reader.request("$JS.API.STREAM.PURGE.TALLY_CHANGES"))
		reader.denied(t, `Publish to "$JS.API.CONSUMER.CREATE.TALLY_EVENTS.x"`, reader.request("$JS.API.CONSUMER.CREATE.TALLY_EVENTS.x"))
		reader.denied(t, `Publish to "$JS.API.CONSUMER.CREATE.TALLY_EVENTS.x.tally.chg.>"`, reader.request("$JS.API.CONSUMER.CREATE.TALLY_EVENTS.x.tally.chg.>"))
		// A consumer of the changes only with a filter inside tally.chg.
		reader.denied(t, `Publish to "$JS.API.CONSUMER.CREATE.TALLY_CHANGES.x"`, reader.request("$JS.API.CONSUMER.CREATE.TALLY_CHANGES.x"))
		reader.denied(t, `Publish to "tally.ev.system.1"`, reader.publish("tally.ev.system.1"))
	})
	t.Run("isolation", func(t *testing.T) {
		// A second reader (user gateway): it reads and watches like reader, with no
		// violation, on its own inbox.
		gateway := connect(t, s, "gateway", pw["gateway"])
		gw, err := client.New(gateway.Conn)
		if err != nil {
			t.Fatal(err)
		}
		logged.take()
		changes, err := ajs.Stream(ctx, "TALLY_CHANGES")
		if err != nil {
			t.Fatal(err)
		}
		before := consumerNames(t, changes)
		wctx, stop := context.WithCancel(ctx)
		defer stop()
		gwatch, err := gw.Watch(wctx, "post")
		if err != nil {
			t.Fatalf("gateway watch: %v", err)
		}
		if r, err := gw.Get(ctx, "post", 42); err != nil || len(r.Counts) != 1 {
			t.Fatalf("gateway get: %+v %v", r, err)
		}
		logged.none(t)
		var theirs []string
		for name := range consumerNames(t, changes) {
			if !before[name] {
				theirs = append(theirs, name)
			}
		}
		if len(theirs) != 1 {
			t.Fatalf("consumers the gateway's watch created: %v, want one", theirs)
		}

		// A reader cannot see the gateway's replies, tallyd's (pulled events, backup
		// chunks, other tallyd's counters), producers' acks, nor everyone's.
		for _, subj := range []string{"_INBOX.>", "_INBOX_gateway.>", "_INBOX_tallyd.>", "_INBOX_producer.>", "_INBOX_gateway.x", "_INBOX.*", ">"} {
			reader.denied(t, `Subscription to "`+subj+`"`, reader.subscribe(subj))
		}
		// Nor find, inspect, take over or delete the gateway's consumer.
		name := theirs[0]
		reader.denied(t, `Publish to "$JS.API.CONSUMER.DELETE.TALLY_CHANGES.`+name+`"`, reader.request("$JS.API.CONSUMER.DELETE.TALLY_CHANGES."+name))
		reader.denied(t, `Publish to "$JS.API.CONSUMER.INFO.TALLY_CHANGES.`+name+`"`, reader.request("$JS.API.CONSUMER.INFO.TALLY_CHANGES."+name))
		reader.denied(t, `Publish to "$JS.API.CONSUMER.NAMES.TALLY_CHANGES"`, reader.request("$JS.API.CONSUMER.NAMES.TALLY_CHANGES"))
		reader.denied(t, `Publish to "$JS.API.CONSUMER.LIST.TALLY_CHANGES"`, reader.request("$JS.API.CONSUMER.LIST.TALLY_CHANGES"))
		reader.denied(t, `Publish to "$JS.API.CONSUMER.DURABLE.CREATE.TALLY_CHANGES.`+name+`"`, reader.request("$JS.API.CONSUMER.DURABLE.CREATE.TALLY_CHANGES."+name))
		if !consumerNames(t, changes)[name] {
			t.Fatalf("the gateway's consumer %s is gone", name)
		}
		// The gateway's watch still delivers.
		if err := prod.Publish(ctx, pipeline.Event{Type: "view", Post: 42, Tx: "iso-1"}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-gwatch:
		case <-time.After(10 * time.Second):
			t.Error("gateway watch: no change event")
		}
	})
	t.Run("tallyd", func(t *testing.T) {
		td := connect(t, s, "tallyd", pw["tallyd"])
		// Another tallyd asks the node for the counters of each of its partitions, with no
		// violation (those logged so far are the refusals checked above).
		logged.take()
		var ids []pipeline.ID
		var token string // the node's peer token, named in its replies
		for p := range cfg.Partitions {
			var id pipeline.ID
			for id = 1; pipeline.PartitionOf(id, cfg.Partitions) != p; id++ {
			}
			ids = append(ids, id)
			data, err := pipeline.Marshal(pipeline.GetRequest{IDs: []pipeline.ID{id}}, false)
			if err != nil {
				t.Fatal(err)
			}
			m, err := td.Request("tally.part.post."+strconv.Itoa(p), data, 10*time.Second)
			if err != nil {
				t.Fatalf("tallyd request tally.part.post.%d: %v (violations: %q)", p, err, logged.take())
			}
			var r pipeline.GetReply
			if err := pipeline.Unmarshal(m.Data, false, &r); err != nil || r.Error != "" || len(r.Counts) != 1 {
				t.Errorf("tally.part.post.%d for %d: %+v %v", p, id, r, err)
			}
			token = m.Header.Get("Tally-Peer")
		}
		// And for the ids of all its partitions at once, on its peer subject.
		data, err := pipeline.Marshal(pipeline.GetRequest{IDs: ids}, false)
		if err != nil {
			t.Fatal(err)
		}
		m, err := td.Request("tally.part.post.peer."+token, data, 10*time.Second)
		if err != nil {
			t.Fatalf("tallyd request tally.part.post.peer.%s: %v (violations: %q)", token, err, logged.take())
		}
		var r pipeline.GetReply
		if err := pipeline.Unmarshal(m.Data, false, &r); err != nil || r.Error != "" || len(r.Counts) != len(ids) || len(r.Unavailable) != 0 {
			t.Errorf("tally.part.post.peer.%s for %v: %+v %v", token, ids, r, err)
		}
		logged.none(t)
		td.denied(t, `Subscription to "tally.part.post.0" using queue "other"`, func() error {
			_, err := td.QueueSubscribeSync("tally.part.post.0", "other")
			return err
		})
		td.denied(t, `Subscription to "tally.get.post"`, td.subscribe("tally.get.post"))
		td.denied(t, `Subscription to "tally.get.post" using queue "other"`, func() error {
			_, err := td.QueueSubscribeSync("tally.get.post", "other")
			return err
		})
		td.denied(t, `Subscription to "tally.ev.>"`, td.subscribe("tally.ev.>"))
		td.denied(t, `Publish to "_INBOX.someone"`, td.publish("_INBOX.someone"))
		td.denied(t, `Subscription to "_INBOX.>"`, td.subscribe("_INBOX.>"))
		td.denied(t, `Subscription to "_INBOX_reader.>"`, td.subscribe("_INBOX_reader.>"))
		td.denied(t, `Publish to "tally.get.post"`, td.publish("tally.get.post"))
		td.denied(t, `Publish to "$JS.API.STREAM.DELETE.TALLY_EVENTS"`, td.request("$JS.API.STREAM.DELETE.TALLY_EVENTS"))
		td.denied(t, `Publish to "$JS.API.STREAM.PURGE.TALLY_EVENTS"`, td.request("$JS.API.STREAM.PURGE.TALLY_EVENTS"))
		td.denied(t, `Publish to "$JS.API.STREAM.CREATE.OTHER"`, td.request("$JS.API.STREAM.CREATE.OTHER"))
		td.denied(t, `Publish to "$JS.API.CONSUMER.CREATE.TALLY_CHANGES.x"`, td.request("$JS.API.CONSUMER.CREATE.TALLY_CHANGES.x"))
	})
	t.Run("authentication", func(t *testing.T) {
		for _, u := range []string{"tallyd", "producer", "reader", "gateway", "admin", "sys"} {
			if nc, err := nats.Connect(userURL(s, u, "wrong")); err == nil {
				nc.Close()
				t.Errorf("%s connected with a wrong password", u)
			}
		}
		if nc, err := nats.Connect(s.ClientURL()); err == nil {
			nc.Close()
			t.Error("connected without credentials")
		}
	})
	t.Run("accounts", func(t *testing.T) {
		// The system user sees the server, not Tally's subjects: accounts isolate them.
		sys := connect(t, s, "sys", pw["sys"])
		if _, err := sys.Request("$SYS.REQ.SERVER.PING", nil, 5*time.Second); err != nil {
			t.Errorf("sys ping: %v", err)
		}
		sub, err := sys.SubscribeSync("tally.chg.>")
		if err != nil {
			t.Fatal(err)
		}
		_ = sys.Flush()
		if err := admin.Publish("tally.chg.post.99", []byte("{}")); err != nil {
			t.Errorf("admin publish: %v", err)
		}
		_ = admin.Flush()
		if m, err := sub.NextMsg(300 * time.Millisecond); err == nil {
			t.Errorf("the SYS account received Tally's %s", m.Subject)
		}
	})
}

// consumerNames lists the consumers of st, as the admin user sees them.
func consumerNames(t *testing.T, st jetstream.Stream) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	l := st.ConsumerNames(context.Background())
	for n := range l.Name() {
		names[n] = true
	}
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}
