package main

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// startAuthServer starts a NATS server that admits user u with password pw only.
func startAuthServer(t *testing.T, u, pw string) *server.Server {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, Username: u, Password: pw, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("NATS did not start")
	}
	t.Cleanup(s.Shutdown)
	return s
}

// A password in --server never reaches the terminal, even when the connection fails.
func TestCLIRedactsPasswords(t *testing.T) {
	s := startAuthServer(t, "alice", "right-pw")
	addr := strings.TrimPrefix(s.ClientURL(), "nats://")
	for _, u := range []string{
		"nats://alice:wrong-pw@" + addr,                // refused
		"nats://alice:wrong-pw@127.0.0.1:1",            // nothing listens
		"nats://bad-token@" + addr + ",nats://" + addr, // a token, in a list
	} {
		code, out, errOut := tally(t, "", "health", "--server", u, "--timeout", "2s")
		if code != 1 || strings.Contains(out+errOut, "wrong-pw") || strings.Contains(out+errOut, "bad-token") {
			t.Errorf("--server %s: exit %d, output %q", u, code, out+errOut)
		}
		if parsed, _ := url.Parse(strings.Split(u, ",")[0]); parsed.User.Username() == "alice" && !strings.Contains(errOut, "alice:xxxxx@") {
			t.Errorf("--server %s: %q does not say which user", u, errOut)
		}
	}
}
