package embedded_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/tally-dev/tally/pipeline/embedded"
	"github.com/tally-dev/tally/pipeline/natstest"
)

func start(t *testing.T, a embedded.Auth) (*server.Server, *embedded.Internal) {
	t.Helper()
	in, err := embedded.NewInternal()
	if err != nil {
		t.Fatal(err)
	}
	s, err := embedded.Start(embedded.Config{Host: "127.0.0.1", Port: -1, StoreDir: t.TempDir(), Auth: a, Internal: in})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s, in
}

func connects(t *testing.T, url string, opts ...nats.Option) error {
	t.Helper()
	nc, err := nats.Connect(url, append(opts, nats.Timeout(5*time.Second), nats.NoReconnect())...)
	if err == nil {
		nc.Close()
	}
	return err
}

// The process's own in-process connection may do anything, JetStream included.
func internalWorks(t *testing.T, s *server.Server, in *embedded.Internal) {
	t.Helper()
	nc, err := nats.Connect(in.URL(s), in.Options(s)...)
	if err != nil {
		t.Fatalf("internal connection: %v", err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}}); err != nil {
		t.Fatalf("internal connection without JetStream: %v", err)
	}
}

func TestUsersAndNKeys(t *testing.T) {
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	s, in := start(t, embedded.Auth{Users: []string{"alice:right-pw"}, NKeys: []string{pub}})
	u := s.ClientURL()
	if err := connects(t, u); err == nil {
		t.Error("an anonymous client was admitted")
	}
	if err := connects(t, strings.Replace(u, "nats://", "nats://alice:wrong-pw@", 1)); err == nil {
		t.Error("a wrong password was admitted")
	}
	if err := connects(t, strings.Replace(u, "nats://", "nats://alice:right-pw@", 1)); err != nil {
		t.Errorf("alice: %v", err)
	}
	if err := connects(t, u, nats.Nkey(pub, kp.Sign)); err != nil {
		t.Errorf("nkey user: %v", err)
	}
	internalWorks(t, s, in)
}

func TestTLS(t *testing.T) {
	f := natstest.NewTLSFiles(t)
	s, in := start(t, embedded.Auth{TLSCert: f.Cert, TLSKey: f.Key, TLSCA: f.CA})
	u := s.ClientURL()
	if err := connects(t, u); err == nil {
		t.Error("a client without TLS was admitted")
	}
	if err := connects(t, u, nats.RootCAs(f.CA)); err == nil {
		t.Error("a client without a certificate was admitted")
	}
	if err := connects(t, u, nats.RootCAs(f.CA), nats.ClientCert(f.Cert, f.Key)); err != nil {
		t.Errorf("a client with a certificate: %v", err)
	}
	internalWorks(t, s, in)
}

// A configuration file with accounts and per-user permissions: the process's own user
// joins the account named, and a user allowed only its own inbox prefix gets answers
// there and nowhere else.
func TestConfigFile(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "nats.conf")
	err := os.WriteFile(conf, []byte(`
accounts {
  TALLY: {
    jetstream: enabled
    users: [
      {user: alice, password: alice-pw, permissions: {publish: ["tally.get.>"], subscribe: ["_INBOX_alice.>"]}}
    ]
  }
}
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := embedded.Start(embedded.Config{Host: "127.0.0.1", Port: -1, StoreDir: t.TempDir(), Auth: embedded.Auth{ConfigFile: conf}, Internal: must(embedded.NewInternal())}); !errors.Is(err, embedded.ErrAuth) || !strings.Contains(err.Error(), "TALLY") {
		t.Fatalf("accounts without --nats-account: %v", err)
	}
	s, in := start(t, embedded.Auth{ConfigFile: conf, Account: "TALLY"})
	internalWorks(t, s, in)
	tallyd, err := nats.Connect(in.URL(s), in.Options(s)...)
	if err != nil {
		t.Fatal(err)
	}
	defer tallyd.Close()
	if _, err := tallyd.Subscribe("tally.get.post", func(m *nats.Msg) { _ = m.Respond([]byte("counts")) }); err != nil {
		t.Fatal(err)
	}
	if err := tallyd.Flush(); err != nil {
		t.Fatal(err)
	}
	alice := func(opts ...nats.Option) error {
		nc, err := nats.Connect(strings.Replace(s.ClientURL(), "nats://", "nats://alice:alice-pw@", 1),
			append(opts, nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))...)
		if err != nil {
			return err
		}
		defer nc.Close()
		m, err := nc.Request("tally.get.post", nil, time.Second)
		if err == nil && string(m.Data) != "counts" {
			t.Fatalf("reply %q", m.Data)
		}
		return err
	}
	if err := alice(); err == nil {
		t.Error("alice got an answer on _INBOX, which she may not read")
	}
	if err := alice(nats.CustomInboxPrefix("_INBOX_alice")); err != nil {
		t.Errorf("alice with her inbox prefix: %v", err)
	}
}

func TestAuthRefused(t *testing.T) {
	for _, a := range []embedded.Auth{
		{Users: []string{"alice"}},
		{NKeys: []string{"SUAM..."}},
		{TLSCert: "cert.pem"},
		{TLSCA: "ca.pem"},
	} {
		_, err := embedded.Start(embedded.Config{Host: "127.0.0.1", Port: -1, StoreDir: t.TempDir(), Auth: a})
		if !errors.Is(err, embedded.ErrAuth) {
			t.Errorf("%+v: %v, want ErrAuth", a, err)
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
