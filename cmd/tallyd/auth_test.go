package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/tally-dev/tally/pipeline/embedded"
	"github.com/tally-dev/tally/pipeline/natsconn"
	"github.com/tally-dev/tally/pipeline/natstest"
)

func TestParseAuthFlags(t *testing.T) {
	var out bytes.Buffer
	cfg, _, err := parse([]string{"--nats-user", "alice:a,bob:b", "--nats-user", "carol:c", "--nats-nkey", "UA", "--nats-tls-cert", "c.pem",
		"--nats-tls-key", "k.pem", "--nats-tls-ca", "ca.pem", "--nats-config", "n.conf", "--nats-account", "TALLY",
		"--creds", "u.creds", "--nkey", "u.nk", "--tls-cert", "cc.pem", "--tls-key", "ck.pem", "--tls-ca", "cca.pem", "--context", "prod", "--inbox-prefix", "_INBOX_t"},
		envOf("TALLY_NATS_NKEY", "UB"), &out)
	if err != nil {
		t.Fatal(err)
	}
	wantServer := embedded.Auth{ConfigFile: "n.conf", Account: "TALLY", Users: []string{"alice:a", "bob:b", "carol:c"}, NKeys: []string{"UB", "UA"},
		TLSCert: "c.pem", TLSKey: "k.pem", TLSCA: "ca.pem"}
	wantClient := natsconn.Auth{Creds: "u.creds", NKey: "u.nk", TLSCert: "cc.pem", TLSKey: "ck.pem", TLSCA: "cca.pem", Context: "prod", InboxPrefix: "_INBOX_t"}
	if !reflect.DeepEqual(cfg.NATSServer, wantServer) || cfg.NATSAuth != wantClient {
		t.Errorf("server %+v\nclient %+v", cfg.NATSServer, cfg.NATSAuth)
	}
}

// runUntilUp runs tallyd until it says it is up, then stops it; it returns the exit code
// and the output.
func runUntilUp(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var out lockedBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- run(ctx, append(args, "--data", t.TempDir(), "--partitions", "2"), noEnv, &out) }()
	natstest.Eventually(t, time.Minute, "tallyd up or stopped", func() (bool, string) {
		select {
		case code := <-done:
			done <- code
			return true, ""
		default:
		}
		return strings.Contains(out.String(), "tally running"), out.String()
	})
	cancel()
	return <-done, out.String()
}

// tallyd secures its embedded server with --nats-user and keeps working through its
// own in-process user; anonymous clients are refused.
func TestEmbeddedUsers(t *testing.T) {
	var out lockedBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--listen", "127.0.0.1:-1", "--data", t.TempDir(), "--partitions", "2", "--nats-user", "alice:alice-pw"}, noEnv, &out)
	}()
	natstest.Eventually(t, time.Minute, "tallyd up", func() (bool, string) { return strings.Contains(out.String(), "tally running"), out.String() })
	addr := regexpFind(t, out.String(), `nats=nats://([0-9.:]+)`)
	if nc, err := nats.Connect("nats://" + addr); err == nil {
		nc.Close()
		t.Error("an anonymous client was admitted")
	}
	nc, err := nats.Connect("nats://alice:alice-pw@" + addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// Healthy once every partition has loaded (a moment after "tally running").
	natstest.Eventually(t, time.Minute, "healthy as alice", func() (bool, string) {
		m, err := nc.Request("tally.health", []byte("{}"), 5*time.Second)
		if err != nil {
			return false, err.Error()
		}
		return strings.Contains(string(m.Data), `"ok":true`), string(m.Data)
	})
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("exit %d: %s", code, out.String())
	}
}

// tallyd joins a NATS server that admits only an nkey user with --nkey.
func TestJoinWithNKey(t *testing.T) {
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	seedFile := filepath.Join(t.TempDir(), "tallyd.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := embedded.Start(embedded.Config{Host: "127.0.0.1", Port: -1, StoreDir: t.TempDir(), Auth: embedded.Auth{NKeys: []string{pub}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	if code, out := runUntilUp(t, "--nats", s.ClientURL()); code == 0 {
		t.Errorf("joined without its nkey: %s", out)
	}
	if code, out := runUntilUp(t, "--nats", s.ClientURL(), "--nkey", seedFile); code != 0 || !strings.Contains(out, "tally running") {
		t.Errorf("with --nkey: exit %d: %s", code, out)
	}
}

func regexpFind(t *testing.T, s, re string) string {
	t.Helper()
	m := regexp.MustCompile(re).FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("no %s in %s", re, s)
	}
	return m[1]
}
