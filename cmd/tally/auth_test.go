package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/tally-dev/tally/pipeline/embedded"
	"github.com/tally-dev/tally/pipeline/natstest"
	"github.com/tally-dev/tally/stages/node"
)

// startSecured runs a whole tallyd in the test process whose embedded server is secured
// by a, and returns its address (host:port).
func startSecured(t *testing.T, a embedded.Auth) string {
	t.Helper()
	cfg := node.DefaultConfig()
	cfg.DataDir, cfg.Listen, cfg.Partitions, cfg.NATSServer = t.TempDir(), "127.0.0.1:-1", 2, a
	n, err := node.Start(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	return strings.TrimPrefix(n.ClientURL(), "nats://")
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// The CLI reaches a tallyd whose NATS requires TLS and a user, with a password, an nkey
// or a nats CLI context, and nothing else.
func TestCLIAuth(t *testing.T) {
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	tlsFiles := natstest.NewTLSFiles(t)
	addr := startSecured(t, embedded.Auth{Users: []string{"alice:alice-pw"}, NKeys: []string{pub}, TLSCert: tlsFiles.Cert, TLSKey: tlsFiles.Key})
	ctxFile := writeFile(t, "alice.json", fmt.Sprintf(`{"url": "tls://%s", "user": "alice", "password": "alice-pw", "ca": %q}`, addr, tlsFiles.CA))
	elsewhere := writeFile(t, "elsewhere.json", fmt.Sprintf(`{"url": "tls://127.0.0.1:1", "user": "alice", "password": "alice-pw", "ca": %q}`, tlsFiles.CA))
	seedFile := writeFile(t, "alice.nk", string(seed))
	for _, c := range []struct {
		args []string
		ok   bool
	}{
		{[]string{"--server", "tls://alice:alice-pw@" + addr, "--tls-ca", tlsFiles.CA}, true},
		{[]string{"--server", "tls://" + addr, "--tls-ca", tlsFiles.CA, "--nkey", seedFile}, true},
		{[]string{"--context", ctxFile}, true},
		{[]string{"--server", "tls://" + addr, "--tls-ca", tlsFiles.CA}, false},                         // no user
		{[]string{"--server", "tls://alice:alice-pw@" + addr}, false},                                   // unknown CA
		{[]string{"--server", "tls://" + addr, "--context", elsewhere}, true},                           // --server wins over the context's URL
		{[]string{"--context", filepath.Join(t.TempDir(), "missing.json")}, false},                      // no such context
		{[]string{"--server", "tls://" + addr, "--tls-ca", tlsFiles.CA, "--nkey", tlsFiles.Key}, false}, // not a seed
	} {
		var code int
		var out string
		natstest.Eventually(t, time.Minute, "tallyd caught up", func() (bool, string) {
			var o, e string
			code, o, e = tally(t, "", append([]string{"health", "--timeout", "2s"}, c.args...)...)
			out = o + e
			return !c.ok || code == 0, out
		})
		if (code == 0) != c.ok {
			t.Errorf("%v: exit %d, want success %v: %s", c.args, code, c.ok, out)
		}
	}
}

// With --inbox-prefix the CLI gets answers where a deployment lets only its user read.
func TestCLIInboxPrefix(t *testing.T) {
	conf := writeFile(t, "nats.conf", `
accounts {
  TALLY: {
    jetstream: enabled
    users: [
      {user: alice, password: alice-pw, permissions: {publish: ["tally.get.>"], subscribe: ["_INBOX_alice.>"]}}
    ]
  }
}
`)
	addr := startSecured(t, embedded.Auth{ConfigFile: conf, Account: "TALLY"})
	get := func(args ...string) (int, string) {
		var o, e strings.Builder
		// No deadline on ctx: --timeout bounds the request, as in the real command.
		code := run(context.Background(), append([]string{"get", "post", "42", "--server", "nats://alice:alice-pw@" + addr, "--timeout", "2s"}, args...),
			env{stdin: strings.NewReader(""), stdout: &o, stderr: &e, getenv: func(string) string { return "" }})
		return code, o.String() + e.String()
	}
	if code, out := get(); code == 0 {
		t.Errorf("alice read replies on _INBOX: %s", out)
	}
	if code, out := get("--inbox-prefix", "_INBOX_alice"); code != 0 || !strings.Contains(out, "42") {
		t.Errorf("alice with --inbox-prefix: exit %d, %s", code, out)
	}
}
